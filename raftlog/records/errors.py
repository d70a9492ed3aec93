"""Typed errors for record batches.

Every way a batch can be bad maps to one of these, so callers can answer a
peer with a Kafka error code (``CORRUPT_MESSAGE``, ``INVALID_RECORD``, ...)
instead of crashing (STYLE.md section 8, tier 1). The tree::

    RecordError
    +-- CorruptRecordError            the bytes are not a valid v2 batch
    |   +-- TruncatedBatchError       fewer bytes than the batch needs
    |   +-- InvalidMagicError         magic byte is not 2
    |   +-- CrcMismatchError          CRC32C over attributes..end disagrees
    |   +-- VarintError               over-long or cut-off varint
    |   +-- RecordCountMismatchError  recordsCount disagrees with the records
    +-- DecompressionLimitError       records expand past the caller's bound
    +-- UnsupportedCompressionError   codec id we cannot (or will not) handle

Each error carries ``pos``: the byte position (in the buffer the caller
passed, or in the records section where stated) where the problem was found.
"""

from __future__ import annotations


class RecordError(Exception):
    """Base of every record-batch error."""

    def __init__(self, message: str, *, pos: int | None = None) -> None:
        super().__init__(message)
        self.pos = pos


class CorruptRecordError(RecordError):
    """The bytes are not a well-formed RecordBatch v2 (Kafka: CORRUPT_MESSAGE)."""


class TruncatedBatchError(CorruptRecordError):
    """The buffer ends before the batch (or its header) does.

    ``needed`` is how many bytes from ``pos`` the batch or header needs,
    ``available`` how many the buffer had.
    """

    def __init__(self, message: str, *, pos: int, needed: int, available: int) -> None:
        super().__init__(message, pos=pos)
        self.needed = needed
        self.available = available


class InvalidMagicError(CorruptRecordError):
    """The magic byte is not 2 (v0/v1 message sets are not supported)."""

    def __init__(self, message: str, *, pos: int, magic: int) -> None:
        super().__init__(message, pos=pos)
        self.magic = magic


class CrcMismatchError(CorruptRecordError):
    """The stored CRC32C does not match the bytes from attributes to the end."""

    def __init__(self, message: str, *, pos: int, stored: int, computed: int) -> None:
        super().__init__(message, pos=pos)
        self.stored = stored
        self.computed = computed


class VarintError(CorruptRecordError):
    """A varint is longer than its type allows, out of range, or cut off."""


class RecordCountMismatchError(CorruptRecordError):
    """``recordsCount`` disagrees with the records actually present."""


class DecompressionLimitError(RecordError):
    """Decompressing the records section would exceed the caller's bound."""


class UnsupportedCompressionError(RecordError):
    """The attributes name a codec this build cannot decode or encode."""
