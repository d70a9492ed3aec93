"""Bootstrap records (KIP-900): what ``storage format --add-scram`` gives a
new cluster before any node runs, so that SCRAM can be the inter-broker
(or controller) mechanism from the first start.

``raftlog storage format --add-scram 'SCRAM-SHA-256=[name=broker,password=s]'``
derives the credential (a random salt, Kafka's 4096 iterations unless
``iterations=N``) and writes it into ``bootstrap.checkpoint`` in the
metadata log directory: the UserScramCredentialRecords, encoded as the
metadata log encodes them, each after its 4-byte length. Every controller
is formatted with the same ``--add-scram``, as in Kafka.

The first active controller of a log that was never bootstrapped writes
these records in one batch, after the `BOOTSTRAP_FEATURE` level that marks
the log bootstrapped (Kafka marks it with ``metadata.version``; raftlog has
no metadata versions). So they are written once per cluster, whichever
controller wins the first election, and a credential later deleted stays
deleted. A batch that did not commit before a leader change is written
again by the next leader; the records replace, so that is harmless.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Sequence
from typing import Final

from metadata_quorum.records import (
    FeatureLevelRecord,
    MetadataRecord,
    MetadataRecordError,
    UserScramCredentialRecord,
    decode_record,
    encode_record,
)
from metadata_quorum.records.types import ScramMechanism
from raftlog.security.scram import credential_from_password

__all__ = ("BOOTSTRAP_FEATURE", "BOOTSTRAP_FILE", "BootstrapError", "bootstrap_batch",
           "parse_add_scram", "read_bootstrap", "write_bootstrap")

BOOTSTRAP_FILE: Final = "bootstrap.checkpoint"
#: The feature whose level marks a bootstrapped log.
BOOTSTRAP_FEATURE: Final = "raftlog.bootstrap.version"
_MIN_ITERATIONS, _MAX_ITERATIONS = 4096, 16384  # Kafka's ScramMechanism bounds
_SPEC: Final = re.compile(r"(SCRAM-SHA-256|SCRAM-SHA-512)=\[(.*)\]", re.DOTALL)
_LENGTH: Final = struct.Struct(">i")


class BootstrapError(ValueError):
    """A bad ``--add-scram`` or an unreadable bootstrap file; the message says why."""


def parse_add_scram(spec: str) -> UserScramCredentialRecord:
    """One ``--add-scram`` argument, Kafka's syntax:
    ``SCRAM-SHA-256=[name=alice,password=alice-secret]``, optionally with
    ``iterations=N`` (4096-16384). Raises BootstrapError."""
    match = _SPEC.fullmatch(spec.strip())
    if match is None:
        raise BootstrapError(f"--add-scram {spec!r} is not MECHANISM=[name=N,password=P] "
                             "(MECHANISM SCRAM-SHA-256 or SCRAM-SHA-512)")
    mechanism, body = match.groups()
    fields: dict[str, str] = {}
    for item in body.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise BootstrapError(f"--add-scram for {mechanism}: {item.strip()!r} is not key=value")
        if key in ("salt", "saltedpassword"):
            raise BootstrapError(f"--add-scram: {key} is not supported; give the password")
        if key not in ("name", "password", "iterations"):
            raise BootstrapError(f"--add-scram: unknown key {key!r} (name, password, iterations)")
        fields[key] = value.strip().strip('"')
    name, password = fields.get("name", ""), fields.get("password")
    if not name or password is None:
        raise BootstrapError(f"--add-scram for {mechanism} needs name= and password=")
    try:
        iterations = int(fields.get("iterations", str(_MIN_ITERATIONS)))
    except ValueError:
        raise BootstrapError(f"--add-scram: iterations={fields['iterations']!r} is not a "
                             "number") from None
    if not _MIN_ITERATIONS <= iterations <= _MAX_ITERATIONS:
        raise BootstrapError(f"--add-scram: iterations must be {_MIN_ITERATIONS}-"
                             f"{_MAX_ITERATIONS}, not {iterations}")
    credential = credential_from_password(mechanism, password, iterations)
    return UserScramCredentialRecord(
        name=name, mechanism=ScramMechanism.from_mechanism_name(mechanism), salt=credential.salt,
        stored_key=credential.stored_key, server_key=credential.server_key,
        iterations=iterations)


def write_bootstrap(directory: str, records: Sequence[MetadataRecord]) -> str:
    """Write ``records`` to ``directory``'s bootstrap file (fsynced, then
    renamed into place); its path."""
    path = os.path.join(directory, BOOTSTRAP_FILE)
    data = b"".join(_LENGTH.pack(len(encoded)) + encoded
                    for encoded in map(encode_record, records))
    temporary = path + ".tmp"
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    return path


def read_bootstrap(directory: str) -> tuple[MetadataRecord, ...]:
    """The records of ``directory``'s bootstrap file; none without one.
    Raises BootstrapError for a damaged file."""
    path = os.path.join(directory, BOOTSTRAP_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return ()
    records = []
    at = 0
    try:
        while at < len(data):
            (size,) = _LENGTH.unpack_from(data, at)
            if size < 0 or at + 4 + size > len(data):
                raise BootstrapError(f"{path}: truncated at byte {at}")
            records.append(decode_record(data[at + 4:at + 4 + size]))
            at += 4 + size
    except (struct.error, MetadataRecordError) as exc:
        raise BootstrapError(f"{path}: {exc}") from None
    return tuple(records)


def bootstrap_batch(records: Sequence[MetadataRecord]) -> tuple[MetadataRecord, ...]:
    """What the first active controller writes: the marker, then ``records``."""
    return (FeatureLevelRecord(BOOTSTRAP_FEATURE, 1), *records)
