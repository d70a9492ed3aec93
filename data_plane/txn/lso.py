"""Last stable offset and the aborted-transaction index (KIP-98 read_committed).

The **last stable offset** is ``min(high watermark, first unstable offset)``
where the first unstable offset is the first offset of the earliest
transaction that is still open (or whose marker is not yet replicated):
`ProducerStateManager.first_unstable_offset`. A ``read_committed`` Fetch
returns data only below the LSO, together with the aborted transactions
overlapping the returned range, so the client drops their records (the
client's own filter; the broker never rewrites batches).

`AbortedTxnIndex` holds Kafka's ``.txnindex`` entries: ``(producer id, first
offset, last offset, last stable offset at the abort)``, ordered by last
offset (the ABORT marker's offset, so in log order). Each segment persists
the entries whose marker lies in it; the file format is Kafka's: per entry
``version int16 (0), producerId int64, firstOffset int64, lastOffset int64,
lastStableOffset int64`` (34 bytes), no header.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from data_plane.txn.producer_state import CompletedTxn

TXN_INDEX_ENTRY_VERSION = 0
TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
TXN_INDEX_ENTRY_SIZE = _ENTRY.size


class TxnIndexError(ValueError):
    """A ``.txnindex`` file that cannot be decoded."""


def last_stable_offset(high_watermark: int, first_unstable_offset: int | None) -> int:
    """``min(HW, first unstable offset)``: the read_committed visibility bound."""
    if first_unstable_offset is None:
        return high_watermark
    return min(high_watermark, first_unstable_offset)


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One ``.txnindex`` entry (Kafka ``AbortedTxn``); also the FetchResponse
    ``AbortedTransaction`` (producer id, first offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def __post_init__(self) -> None:
        if not 0 <= self.first_offset <= self.last_offset:
            raise ValueError(f"aborted txn offsets {self.first_offset}..{self.last_offset}")

    @classmethod
    def from_completed(cls, txn: CompletedTxn) -> AbortedTxn:
        if not txn.is_aborted:
            raise ValueError(f"{txn} was committed, not aborted")
        return cls(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)


def txn_index_file_name(segment_base_offset: int) -> str:
    """``<base offset, 20 digits>.txnindex``, next to the segment's ``.log``."""
    return f"{segment_base_offset:020d}{TXN_INDEX_SUFFIX}"


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    """The bytes of a ``.txnindex`` file holding ``entries`` (appendable: the
    encoding of a list is the concatenation of its entries')."""
    return b"".join(_ENTRY.pack(TXN_INDEX_ENTRY_VERSION, e.producer_id, e.first_offset,
                                e.last_offset, e.last_stable_offset) for e in entries)


def decode_txn_index(data: bytes) -> list[AbortedTxn]:
    """Inverse of `encode_txn_index`. Raises `TxnIndexError` for a torn tail or
    an unknown entry version (the shell then rebuilds the segment's index
    from its log)."""
    if len(data) % TXN_INDEX_ENTRY_SIZE:
        raise TxnIndexError(f"{len(data)} bytes is not a whole number of entries")
    out = []
    for pos in range(0, len(data), TXN_INDEX_ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != TXN_INDEX_ENTRY_VERSION:
            raise TxnIndexError(f"entry at {pos}: version {version}")
        try:
            out.append(AbortedTxn(pid, first, last, lso))
        except ValueError as e:
            raise TxnIndexError(f"entry at {pos}: {e}") from e
    return out


class AbortedTxnIndex:
    """All aborted transactions of one partition replica, by marker offset.

    Fed by `append` (from `ProducerStateManager.update` on an ABORT marker, or
    from `load_from_batches` on rebuild) and by `load_segment` (persisted
    files). Raises `ValueError` if entries arrive out of marker order.
    """

    def __init__(self) -> None:
        self._entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []  # parallel, for bisect

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        return tuple(self._entries)

    def append(self, entry: AbortedTxn) -> None:
        if self._last_offsets and entry.last_offset <= self._last_offsets[-1]:
            raise ValueError(f"aborted txn at {entry.last_offset} after one at "
                             f"{self._last_offsets[-1]}")
        self._entries.append(entry)
        self._last_offsets.append(entry.last_offset)

    def append_completed(self, completed: Iterable[CompletedTxn]) -> int:
        """Append the aborted ones of ``completed``; returns how many."""
        added = 0
        for txn in completed:
            if txn.is_aborted:
                self.append(AbortedTxn.from_completed(txn))
                added += 1
        return added

    def load_segment(self, data: bytes) -> None:
        """Append a persisted segment's entries (segments in base-offset order)."""
        for entry in decode_txn_index(data):
            self.append(entry)

    def segment_bytes(self, base_offset: int, next_base_offset: int | None) -> bytes:
        """The ``.txnindex`` contents of the segment ``[base_offset, next_base_offset)``."""
        lo = bisect.bisect_left(self._last_offsets, base_offset)
        hi = (len(self._last_offsets) if next_base_offset is None
              else bisect.bisect_left(self._last_offsets, next_base_offset))
        return encode_txn_index(self._entries[lo:hi])

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or above ``offset`` (log truncation)."""
        cut = bisect.bisect_left(self._last_offsets, offset)
        del self._entries[cut:]
        del self._last_offsets[cut:]

    def truncate_head(self, log_start_offset: int) -> None:
        """Drop entries whose marker fell below the log start (retention)."""
        cut = bisect.bisect_left(self._last_offsets, log_start_offset)
        del self._entries[:cut]
        del self._last_offsets[:cut]

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions a read_committed fetch of ``[fetch_offset,
        upper_bound)`` must report: those with ``last_offset >= fetch_offset``
        and ``first_offset < upper_bound`` (Kafka ``collectAbortedTxns``).

        The scan starts at the first marker at or after ``fetch_offset`` and
        stops after an entry whose recorded LSO is ``>= upper_bound``: every
        later abort began at or after that LSO, so past the fetched range.
        """
        out: list[AbortedTxn] = []
        start = bisect.bisect_left(self._last_offsets, fetch_offset)
        for entry in self._entries[start:]:
            if entry.first_offset < upper_bound:
                out.append(entry)
            if entry.last_stable_offset >= upper_bound:
                break
        return out


def visible_offsets_read_committed(
    batches: Sequence[tuple[int, int, int, bool, bool]],
    aborted: Sequence[AbortedTxn],
) -> list[int]:
    """What a read_committed client keeps from fetched batches, as Kafka's
    consumer does (``Fetcher``'s abortedProducerIds filter): reference model
    for tests and the simulation, not the broker path.

    ``batches`` are ``(base offset, last offset, producer id, transactional,
    control)`` in offset order; ``aborted`` is the fetch's aborted list.
    Returns the offsets of the data records shown to the application.
    """
    pending = sorted(aborted, key=lambda a: a.first_offset)
    next_abort = 0
    aborted_pids: set[int] = set()
    out: list[int] = []
    for base, last, pid, transactional, control in batches:
        while next_abort < len(pending) and pending[next_abort].first_offset <= last:
            aborted_pids.add(pending[next_abort].producer_id)
            next_abort += 1
        if control:
            # An ABORT marker ends the aborted range of its producer.
            if transactional:
                aborted_pids.discard(pid)
            continue
        if transactional and pid in aborted_pids:
            continue
        out.extend(range(base, last + 1))
    return out
