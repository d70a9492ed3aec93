"""The LEADER_CHANGE control record a new leader writes first (KIP-595).

Its value is Kafka's ``LeaderChangeMessage`` v0 (flexible): Version int16,
LeaderId int32, Voters and GrantingVoters as compact arrays of ``{VoterId
int32}``, each struct and the message ending with an empty tagged-field
section.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from raftlog.records import ControlRecordType, build_control_batch

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """Who leads, which voters exist and which of them granted the vote."""

    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.leader_id < 0:
            raise ValueError("leader_id must be >= 0")
        if not set(self.granting_voters) <= set(self.voters):
            raise ValueError("granting voters must be voters")


def _uvarint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ValueError("bad unsigned varint in LeaderChangeMessage")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def encode_leader_change(message: LeaderChangeMessage) -> bytes:
    """Serialise ``message`` as LeaderChangeMessage v0."""
    out = bytearray(_INT16.pack(0))
    out += _INT32.pack(message.leader_id)
    for ids in (message.voters, message.granting_voters):
        _uvarint(len(ids) + 1, out)
        for voter_id in ids:
            out += _INT32.pack(voter_id)
            out.append(0)  # the struct's tagged fields
    out.append(0)  # the message's tagged fields
    return bytes(out)


def decode_leader_change(buf: bytes) -> LeaderChangeMessage:
    """Parse a LeaderChangeMessage v0. Raises ValueError if malformed."""
    try:
        (version,) = _INT16.unpack_from(buf, 0)
        (leader_id,) = _INT32.unpack_from(buf, 2)
        pos = 6
        arrays: list[tuple[int, ...]] = []
        for _ in range(2):
            length, pos = _read_uvarint(buf, pos)
            ids = []
            for _ in range(length - 1):
                ids.append(_INT32.unpack_from(buf, pos)[0])
                if buf[pos + 4] != 0:
                    raise ValueError("unexpected tagged fields")
                pos += 5
            arrays.append(tuple(ids))
    except (struct.error, IndexError) as exc:
        raise ValueError("truncated LeaderChangeMessage") from exc
    if version != 0:
        raise ValueError(f"unsupported LeaderChangeMessage version {version}")
    return LeaderChangeMessage(leader_id, arrays[0], arrays[1])


def build_leader_change_batch(message: LeaderChangeMessage, *, epoch: int, base_offset: int,
                              now_ms: int) -> bytes:
    """The control batch a new leader appends at the start of its epoch."""
    return build_control_batch(ControlRecordType.LEADER_CHANGE, encode_leader_change(message),
                               timestamp_ms=now_ms, base_offset=base_offset,
                               partition_leader_epoch=epoch)
