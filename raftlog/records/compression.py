"""Codecs for the records section of a v2 batch.

Kafka compresses only the records section (everything after the 61-byte
header); the header stays plain so a broker can validate and re-offset a
batch without touching the payload (KIP-98). The codec id lives in
attribute bits 0-2 (``CompressionType``: 0 none, 1 gzip, 2 snappy, 3 lz4,
4 zstd, KIP-110). The framings are those Kafka's Java client writes:

- gzip: a gzip stream (RFC 1952, ``GZIPOutputStream``);
- snappy: xerial ``SnappyOutputStream`` framing (a 16-byte header, then
  blocks of ``int32 length + raw snappy``); raw unframed snappy is accepted
  on read, as Kafka clients do;
- lz4: the LZ4 frame format (KIP-57);
- zstd: a zstd frame (KIP-110).

Every decoder is bounded: it stops and raises DecompressionLimitError once
the output passes ``limit`` bytes, decoding incrementally so a bomb costs at
most about twice the limit in memory, never its full expansion. Malformed or
cut-off compressed data raises CorruptRecordError.
"""

from __future__ import annotations

import gzip
import importlib
import struct
import zlib
from typing import Any, Final

import zstandard

from .batch import Buffer, Compression
from .errors import CorruptRecordError, DecompressionLimitError, UnsupportedCompressionError


def _optional_module(name: str) -> Any:
    # lz4 and cramjam ship no type stubs; they are optional, and a missing one
    # turns into UnsupportedCompressionError at use, not an ImportError here.
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover - exercised only without the package
        return None


_lz4_frame: Any = _optional_module("lz4.frame")
_cramjam: Any = _optional_module("cramjam")

_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
# The largest zstd window we accept (zstd's own default limit, 2^27): a
# hostile frame header cannot make us allocate more than this.
_ZSTD_MAX_WINDOW: Final = 1 << 27
# One zstd block decodes to at most 128 KiB from as little as 4 input bytes
# (an RLE block), so feeding N input bytes yields at most 32 KiB * N.
_ZSTD_MAX_RATIO: Final = 32 * 1024
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = struct.Struct(">8sii")
_XERIAL_BLOCK_LEN: Final = struct.Struct(">i")
# snappy-java's default SnappyOutputStream block size.
_XERIAL_BLOCK_SIZE: Final = 32 * 1024
_CODEC_MASK: Final = 0x07


def codec_from_attributes(attributes: int) -> Compression:
    """The codec named by attribute bits 0-2; raises UnsupportedCompressionError for 5-7."""
    codec_id = attributes & _CODEC_MASK
    try:
        return Compression(codec_id)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec id {codec_id}") from None


def compress(codec: Compression, data: Buffer) -> bytes:
    """Compress a records section with ``codec`` (NONE returns it unchanged).

    Raises UnsupportedCompressionError if the codec's package is missing.
    """
    match codec:
        case Compression.NONE:
            return bytes(data)
        case Compression.GZIP:
            # mtime=0 keeps the output deterministic for a given input.
            return gzip.compress(bytes(data), mtime=0)
        case Compression.ZSTD:
            return zstandard.ZstdCompressor().compress(bytes(data))
        case Compression.LZ4:
            return bytes(_require_lz4().compress(bytes(data)))
        case Compression.SNAPPY:
            return _xerial_snappy_compress(bytes(data))
    raise UnsupportedCompressionError(f"unknown compression codec {codec!r}")


def decompress(codec: Compression, data: Buffer, *, limit: int) -> bytes:
    """Decompress a records section, refusing to produce more than ``limit`` bytes.

    Raises DecompressionLimitError past the limit, CorruptRecordError for
    malformed or cut-off input, UnsupportedCompressionError if the codec's
    package is missing.
    """
    match codec:
        case Compression.NONE:
            return bytes(data)
        case Compression.GZIP:
            return _gzip_decompress(data, limit)
        case Compression.ZSTD:
            return _zstd_decompress(data, limit)
        case Compression.LZ4:
            return _lz4_decompress(data, limit)
        case Compression.SNAPPY:
            return _snappy_decompress(data, limit)
    raise UnsupportedCompressionError(f"unknown compression codec {codec!r}")


def _over_limit(codec: str, limit: int) -> DecompressionLimitError:
    return DecompressionLimitError(
        f"{codec} records section decompresses to more than {limit} bytes"
    )


def _gzip_decompress(data: Buffer, limit: int) -> bytes:
    # Concatenated gzip members are one stream (RFC 1952 section 2.2), as
    # Java's GZIPInputStream reads them.
    out = bytearray()
    pending = bytes(data)
    try:
        while True:
            decoder = zlib.decompressobj(_GZIP_WBITS)
            # max_length=0 would mean "unbounded": limit + 1 - len(out) is >= 1.
            out += decoder.decompress(pending, limit + 1 - len(out))
            while not decoder.eof and decoder.unconsumed_tail and len(out) <= limit:
                out += decoder.decompress(decoder.unconsumed_tail, limit + 1 - len(out))
            if len(out) > limit:
                raise _over_limit("gzip", limit)
            if not decoder.eof:
                raise CorruptRecordError("gzip records section is cut off")
            pending = decoder.unused_data
            if not pending:
                return bytes(out)
    except zlib.error as exc:
        raise CorruptRecordError(f"gzip records section is malformed: {exc}") from exc


def _zstd_decompress(data: Buffer, limit: int) -> bytes:
    # python-zstandard's decompressobj has no max_length, so feed it input in
    # slices small enough that one slice cannot overshoot the remaining budget
    # by more than the budget itself (_ZSTD_MAX_RATIO bounds the expansion).
    dctx = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
    view = memoryview(bytes(data))
    out = bytearray()
    pos = 0
    try:
        decoder = dctx.decompressobj()
        while pos < len(view):
            budget = limit + 1 - len(out)
            step = min(max(budget // _ZSTD_MAX_RATIO, 64), 1 << 16)
            chunk = view[pos : pos + step]
            out += decoder.decompress(chunk)
            pos += len(chunk)
            if len(out) > limit:
                raise _over_limit("zstd", limit)
            if decoder.eof:
                # Several frames back to back are one stream, as zstd-jni reads them.
                pos -= len(decoder.unused_data)
                if pos < len(view):
                    decoder = dctx.decompressobj()
        if not decoder.eof:
            raise CorruptRecordError("zstd records section is cut off")
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"zstd records section is malformed: {exc}") from exc
    return bytes(out)


def _require_lz4() -> Any:
    if _lz4_frame is None:
        raise UnsupportedCompressionError("lz4 compression needs the 'lz4' package")
    return _lz4_frame


def _lz4_decompress(data: Buffer, limit: int) -> bytes:
    lz4_frame = _require_lz4()
    out = bytearray()
    pending = bytes(data)
    try:
        while True:
            decoder = lz4_frame.LZ4FrameDecompressor()
            out += decoder.decompress(pending, max_length=limit + 1 - len(out))
            while not decoder.eof and not decoder.needs_input and len(out) <= limit:
                out += decoder.decompress(b"", max_length=limit + 1 - len(out))
            if len(out) > limit:
                raise _over_limit("lz4", limit)
            if not decoder.eof:
                raise CorruptRecordError("lz4 records section is cut off")
            pending = decoder.unused_data
            if not pending:
                return bytes(out)
    except RuntimeError as exc:  # lz4.frame reports bad input as RuntimeError
        raise CorruptRecordError(f"lz4 records section is malformed: {exc}") from exc


def _require_cramjam() -> Any:
    if _cramjam is None:
        raise UnsupportedCompressionError("snappy compression needs the 'cramjam' package")
    return _cramjam


def _xerial_snappy_compress(data: bytes) -> bytes:
    cramjam = _require_cramjam()
    out = bytearray(_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1))
    for start in range(0, len(data), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_SIZE]))
        out += _XERIAL_BLOCK_LEN.pack(len(block))
        out += block
    return bytes(out)


def _snappy_block(cramjam: Any, block: bytes, budget: int, limit: int) -> bytes:
    # A raw snappy block states its uncompressed length up front, so the
    # limit is checked before any output is allocated.
    try:
        size = int(cramjam.snappy.decompress_raw_len(block))
    except Exception as exc:
        raise CorruptRecordError(f"snappy block is malformed: {exc}") from exc
    if size > budget:
        raise _over_limit("snappy", limit)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as exc:
        raise CorruptRecordError(f"snappy block is malformed: {exc}") from exc


def _snappy_decompress(data: Buffer, limit: int) -> bytes:
    cramjam = _require_cramjam()
    raw = bytes(data)
    if not raw.startswith(_XERIAL_MAGIC):
        return _snappy_block(cramjam, raw, limit, limit)
    if len(raw) < _XERIAL_HEADER.size:
        raise CorruptRecordError("xerial snappy header is cut off")
    out = bytearray()
    pos = _XERIAL_HEADER.size
    while pos < len(raw):
        if len(raw) - pos < _XERIAL_BLOCK_LEN.size:
            raise CorruptRecordError(f"xerial snappy block length at {pos} is cut off")
        (length,) = _XERIAL_BLOCK_LEN.unpack_from(raw, pos)
        pos += _XERIAL_BLOCK_LEN.size
        if length < 0 or length > len(raw) - pos:
            raise CorruptRecordError(f"xerial snappy block at {pos} has bad length {length}")
        out += _snappy_block(cramjam, raw[pos : pos + length], limit - len(out), limit)
        pos += length
    return bytes(out)
