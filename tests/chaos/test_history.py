from __future__ import annotations

from pathlib import Path

import pytest

from chaos.history import (
    History,
    HistoryError,
    HistoryRecorder,
    Op,
    OpType,
    classify_error,
    end_offsets_of,
    pairs,
    read_jsonl,
    records_of,
    sends_of,
    write_jsonl,
)
from tests.chaos.hist import H


def test_op_is_frozen_and_validated() -> None:
    op = Op(0, 5, OpType.INVOKE, 1, "send", {"partition": 0, "value": 1})
    with pytest.raises(AttributeError):
        op.index = 3  # type: ignore[misc]
    with pytest.raises(HistoryError):
        Op(-1, 0, OpType.OK, 1, "send")
    with pytest.raises(HistoryError):
        Op(0, 0, OpType.OK, 1, "")


def test_history_requires_dense_indexes() -> None:
    with pytest.raises(HistoryError):
        History([Op(1, 0, OpType.INVOKE, 1, "poll")])


def test_indefinite_errors_are_info_never_fail() -> None:
    # KAFKA-13574: NOT_LEADER_OR_FOLLOWER after a leader change may have committed.
    assert classify_error("NOT_LEADER_OR_FOLLOWER") is OpType.INFO
    assert classify_error("REQUEST_TIMED_OUT") is OpType.INFO
    assert classify_error("some error we never heard of") is OpType.INFO
    assert classify_error("NOT_ENOUGH_REPLICAS") is OpType.FAIL
    assert classify_error("transaction_aborted") is OpType.FAIL


def test_jsonl_round_trip_and_streaming_append(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryRecorder(path) as rec:
        rec.record(10, OpType.INVOKE, 0, "send", {"partition": 1, "value": 7})
        # visible on disk before close: streaming, flushed per op
        assert len(read_jsonl(path)) == 1
        rec.record(20, OpType.OK, 0, "send", {"partition": 1, "value": 7, "offset": 3})
        h = rec.history()
    back = read_jsonl(path)
    assert list(back) == list(h)
    assert sends_of(back[1])[0].offset == 3
    other = tmp_path / "copy.jsonl"
    write_jsonl(back, other)
    assert list(read_jsonl(other)) == list(h)


def test_torn_last_line_is_dropped_but_torn_middle_raises(tmp_path: Path) -> None:
    h = H().send(0, 0, 1, 0).poll(1, {0: [(0, 1)]}).build()
    path = tmp_path / "h.jsonl"
    write_jsonl(h, path)
    text = path.read_text()
    path.write_text(text + '{"index": 4, "time": 9, "ty')  # crash mid-write
    assert list(read_jsonl(path)) == list(h)
    lines = text.splitlines()
    lines[1] = lines[1][:10]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(HistoryError):
        read_jsonl(path)


def test_pairs_match_invocations_with_completions() -> None:
    h = (
        H()
        ._add("invoke", 0, "send", {"partition": 0, "value": 1})
        ._add("invoke", 1, "poll", None)
        ._add("ok", 1, "poll", {"records": {"0": [[0, 1]]}})
        ._add("info", 0, "send", {"partition": 0, "value": 1})
        ._add("invoke", 2, "send", {"partition": 0, "value": 2})
        .build()
    )
    ps = pairs(h)
    assert [(p.invoke.index, p.complete.index if p.complete else None) for p in ps] == [
        (0, 3),
        (1, 2),
        (4, None),
    ]
    assert [p.type for p in ps] == [OpType.INFO, OpType.OK, OpType.INFO]
    assert ps[1].latency_ns == 1_000_000
    assert records_of(h[2]) == {0: [(0, 1)]}


def test_double_invoke_is_an_error() -> None:
    h = History([Op(0, 0, OpType.INVOKE, 1, "poll"), Op(1, 1, OpType.INVOKE, 1, "poll")])
    with pytest.raises(HistoryError):
        pairs(h)


def test_final_read_end_offsets() -> None:
    h = H().final(3, {0: [(0, 5)], 2: []}, ends={0: 1, 2: 0}).build()
    assert end_offsets_of(h[1]) == {0: 1, 2: 0}
