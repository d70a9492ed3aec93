"""The proposal accumulator: its batches are exactly what `BatchBuilder` builds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.consensus.accumulator import BatchAccumulator
from raftlog.records import BatchBuilder, decode_records


def _built(epoch: int, base_offset: int, calls: list[tuple[list[bytes], int]]) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for values, now_ms in calls:
        for value in values:
            builder.append(value, timestamp_ms=now_ms)
    return builder.build()


@settings(max_examples=200, deadline=None)
@given(
    epoch=st.integers(0, 2**31 - 1),
    base_offset=st.integers(0, 2**40),
    start_ms=st.integers(0, 2**45),
    calls=st.lists(
        st.tuples(
            st.lists(st.binary(max_size=300), min_size=1, max_size=40),
            st.integers(0, 100_000),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_one_lingering_batch_is_byte_for_byte_the_builders(
    epoch: int, base_offset: int, start_ms: int, calls: list[tuple[list[bytes], int]]
) -> None:
    acc = BatchAccumulator(
        epoch=epoch, next_offset=base_offset, linger_ms=10**9, max_batch_bytes=1 << 30
    )
    now_ms = start_ms
    timed = []
    for values, step_ms in calls:
        now_ms += step_ms
        timed.append((values, now_ms))
        acc.append(values, now_ms)
    (batch,) = acc.drain(now_ms, force=True)
    assert batch == _built(epoch, base_offset, timed)


def test_offsets_are_contiguous_across_batches_and_linger_zero_closes_each_append() -> None:
    acc = BatchAccumulator(epoch=3, next_offset=10, linger_ms=0, max_batch_bytes=1 << 20)
    assert acc.append([b"a", b"b"], 5) == 11
    assert acc.append([b"c" * 200] * 300, 6) == 311
    first, second = acc.drain(6)
    assert [r.offset for r in decode_records(first)] == [10, 11]
    assert [r.offset for r in decode_records(second)] == list(range(12, 312))
    assert [r.value for r in decode_records(second)] == [b"c" * 200] * 300


def test_a_full_batch_closes_before_the_next_append() -> None:
    acc = BatchAccumulator(epoch=1, next_offset=0, linger_ms=25, max_batch_bytes=100)
    acc.append([b"x" * 60], 0)
    acc.append([b"y" * 60], 1)  # would exceed 100 bytes: the first batch closes
    assert [r.value for b in acc.drain(1) for r in decode_records(b)] == [b"x" * 60]
    assert acc.deadline_ms() == 26
    assert [r.value for b in acc.drain(26) for r in decode_records(b)] == [b"y" * 60]


def test_values_must_be_bytes() -> None:
    acc = BatchAccumulator(epoch=1, next_offset=0, linger_ms=0, max_batch_bytes=100)
    with pytest.raises(TypeError):
        acc.append([bytearray(b"x")], 0)  # type: ignore[list-item]
    with pytest.raises(ValueError):
        acc.append([], 0)
