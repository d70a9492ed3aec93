"""`data_plane.txn.lso`: LSO, the aborted-transaction index, its file format,
and the read_committed property against a naive reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.txn.lso import (
    AbortedTxn,
    AbortedTxnIndex,
    TxnIndexError,
    decode_txn_index,
    encode_txn_index,
    last_stable_offset,
    txn_index_file_name,
    visible_offsets_read_committed,
)
from data_plane.txn.markers import EndTxnMarker
from data_plane.txn.producer_state import CompletedTxn, ProducerStateManager
from raftlog.records import BatchHeader


def hdr(pid: int, base: int, n: int = 1, *, txn: bool = True, control: bool = False
        ) -> BatchHeader:
    attributes = (0x10 if txn else 0) | (0x20 if control else 0)
    return BatchHeader(base, 59, 0, 2, 0, attributes, n - 1, 0, 0, pid, 0,
                       -1 if control else 0, n)


def test_lso_is_min_of_hw_and_first_unstable_offset() -> None:
    assert last_stable_offset(10, None) == 10
    assert last_stable_offset(10, 4) == 4
    assert last_stable_offset(3, 4) == 3


def test_txnindex_file_round_trip_and_damage() -> None:
    entries = [AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 4, 9, 10)]
    data = encode_txn_index(entries)
    assert len(data) == 68
    assert decode_txn_index(data) == entries
    assert txn_index_file_name(42) == "00000000000000000042.txnindex"
    with pytest.raises(TxnIndexError):
        decode_txn_index(data[:-1])
    with pytest.raises(TxnIndexError):
        decode_txn_index(b"\x00\x07" + data[2:])
    with pytest.raises(TxnIndexError):
        decode_txn_index(encode_txn_index([AbortedTxn(1, 0, 5, 3)])[:10] + b"\xff" * 24)


def test_index_per_segment_files_reload_to_the_same_index() -> None:
    idx = AbortedTxnIndex()
    for e in [AbortedTxn(1, 0, 2, 3), AbortedTxn(2, 1, 7, 8), AbortedTxn(3, 9, 12, 13)]:
        idx.append(e)
    files = [idx.segment_bytes(0, 5), idx.segment_bytes(5, 10), idx.segment_bytes(10, None)]
    assert [len(decode_txn_index(f)) for f in files] == [1, 1, 1]
    again = AbortedTxnIndex()
    for f in files:
        again.load_segment(f)
    assert again.entries == idx.entries
    with pytest.raises(ValueError):
        again.append(AbortedTxn(4, 0, 12, 13))


def test_collect_aborted_transactions_like_kafka() -> None:
    idx = AbortedTxnIndex()
    idx.append(AbortedTxn(1, 0, 4, 2))
    idx.append(AbortedTxn(2, 2, 6, 7))
    idx.append(AbortedTxn(3, 8, 10, 11))
    assert [a.producer_id for a in idx.aborted_transactions(0, 3)] == [1, 2]
    assert [a.producer_id for a in idx.aborted_transactions(5, 20)] == [2, 3]
    # the scan stops at an entry whose LSO passes the upper bound
    assert [a.producer_id for a in idx.aborted_transactions(5, 7)] == [2]
    assert idx.aborted_transactions(11, 20) == []
    idx.truncate_to(6)
    assert [a.producer_id for a in idx.entries] == [1]
    idx.truncate_head(5)
    assert len(idx) == 0


def test_only_aborted_completions_enter_the_index() -> None:
    idx = AbortedTxnIndex()
    n = idx.append_completed([CompletedTxn(1, 0, 3, False, 4), CompletedTxn(2, 1, 5, True, 6)])
    assert n == 1 and idx.entries == (AbortedTxn(2, 1, 5, 6),)
    with pytest.raises(ValueError):
        AbortedTxn.from_completed(CompletedTxn(1, 0, 3, False, 4))


# ---- property: read_committed never shows an aborted record --------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["data", "commit", "abort", "plain"]),
                          st.integers(1, 3)), max_size=60),
       st.data())
def test_read_committed_below_lso_never_shows_aborted_records(
        ops: list[tuple[int, str, int]], data: st.DataObject) -> None:
    psm = ProducerStateManager()
    idx = AbortedTxnIndex()
    batches: list[tuple[int, int, int, bool, bool]] = []
    aborted_offsets: set[int] = set()
    open_offsets: dict[int, list[int]] = {}
    committed: set[int] = set()
    leo = 0
    for pid, kind, n in ops:
        if kind in ("data", "plain"):
            txn = kind == "data"
            h = hdr(pid, leo, n, txn=txn)
            psm.update(h, leo, h.last_offset)
            batches.append((leo, h.last_offset, pid, txn, False))
            offsets = list(range(leo, h.last_offset + 1))
            if txn:
                open_offsets.setdefault(pid, []).extend(offsets)
            else:
                committed.update(offsets)
            leo = h.last_offset + 1
        else:
            h = hdr(pid, leo, txn=True, control=True)
            done = psm.update(h, leo, leo, EndTxnMarker(kind == "commit", 0))
            assert done is not None
            idx.append_completed([done])
            batches.append((leo, leo, pid, True, True))
            (aborted_offsets if kind == "abort" else committed).update(
                open_offsets.pop(pid, []))
            leo += 1
    hw = data.draw(st.integers(0, leo))
    psm.on_high_watermark(hw)
    lso = last_stable_offset(hw, psm.first_unstable_offset())
    fetch_offset = data.draw(st.integers(0, max(lso, 0)))
    fetched = [b for b in batches if b[1] >= fetch_offset and b[1] < lso]
    shown = visible_offsets_read_committed(
        fetched, idx.aborted_transactions(fetch_offset, lso))
    assert not set(shown) & aborted_offsets
    assert all(o < lso for o in shown)
    # nothing still open below the LSO, and every committed record there is shown
    assert all(o >= lso for offs in open_offsets.values() for o in offs)
    fetched_offsets = {o for b in fetched for o in range(b[0], b[1] + 1)}
    assert committed & fetched_offsets <= set(shown)
