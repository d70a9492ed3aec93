"""The ``quorum-state`` file: the durable `ElectionState` (Kafka's ``FileQuorumStateStore``).

Format: Kafka's ``QuorumStateData`` as JSON (``data_version`` 0, the pre-KIP-853
shape, which lists the static voters), one object, for example::

    {"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

``-1`` means "none" for ``leaderId`` and ``votedId``. ``appliedOffset`` is
always 0, as in Kafka (it is unused there too). raftlog adds one field,
``raftlogRecovering``, written only while it is true (a voter rebuilding after
disk loss, see `raftlog.consensus.roles.ElectionState`), so a file written by
a healthy raftlog node has exactly Kafka's fields.

Durability: `QuorumStateStore.write` writes ``quorum-state.tmp``, fsyncs it,
renames it over ``quorum-state`` and fsyncs the directory, so a crash leaves
the old or the new state, never a torn one. The core requires this write to
return before anything promised by the new state is sent.

Reading back is strict: a missing file is "no state yet" (a fresh disk), but
a file that exists and cannot be parsed or fails validation raises
`CorruptQuorumStateError`. It is never treated as empty: a node that forgot
its vote could vote twice in one epoch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, Final

from raftlog.consensus.roles import ElectionState
from raftlog.storage.files import FileSystem, RealFileSystem, read_whole_file, write_file_atomically

__all__ = ("QUORUM_STATE_FILE", "CorruptQuorumStateError", "QuorumStateStore")

QUORUM_STATE_FILE: Final = "quorum-state"
_DATA_VERSION: Final = 0
_NONE: Final = -1
_INT32_MAX: Final = 2**31 - 1


class CorruptQuorumStateError(Exception):
    """The ``quorum-state`` file exists but is not a valid QuorumStateData.

    The node must not start (STYLE.md section 8, tier 3): an operator has to
    look at it. ``path`` names the file.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: corrupt quorum state: {reason}")
        self.path = path
        self.reason = reason


class QuorumStateStore:
    """Reads and writes ``<directory>/quorum-state``.

    ``voters`` are written as ``currentVoters`` (informational; the
    configuration is the authority) and, when given, checked on read: a file
    naming a leader or vote outside the voter set is corrupt.
    ``cluster_id`` is written as ``clusterId`` ("" if None).
    """

    def __init__(
        self,
        directory: str,
        *,
        voters: Iterable[int] = (),
        cluster_id: str | None = None,
        fs: FileSystem | None = None,
    ) -> None:
        self.directory = directory
        self.path = os.path.join(directory, QUORUM_STATE_FILE)
        self.voters = tuple(sorted(set(voters)))
        self.cluster_id = cluster_id
        self._fs: FileSystem = fs if fs is not None else RealFileSystem()

    def read(self) -> ElectionState | None:
        """The stored state, or None if the file does not exist.

        Raises `CorruptQuorumStateError` for anything else that is not a valid
        state (bad JSON, missing or mistyped fields, negative epoch, an
        unknown ``data_version``, ids outside the voter set).
        """
        if not self._fs.exists(self.path):
            return None
        raw = read_whole_file(self._fs, self.path)
        return self._decode(raw)

    def write(self, state: ElectionState) -> None:
        """Replace the stored state with ``state``, durably (see module doc).

        Raises ValueError if ``state`` names a leader or vote outside the
        configured voters (a caller bug), OSError from the file system.
        """
        self._check_ids(state.leader_id, state.voted_id, error=ValueError)
        data = self.encode(state)
        # Check the other side of the boundary before it is trusted.
        if self._decode(data) != state:
            raise AssertionError(f"quorum state {state} does not survive encoding")
        self._fs.make_dirs(self.directory)
        write_file_atomically(self._fs, self.path, data)

    def encode(self, state: ElectionState) -> bytes:
        """The file's bytes for ``state``."""
        document: dict[str, Any] = {
            "clusterId": self.cluster_id or "",
            "leaderId": _NONE if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": _NONE if state.voted_id is None else state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in self.voters],
            "data_version": _DATA_VERSION,
        }
        if state.recovering:
            document["raftlogRecovering"] = True
        return json.dumps(document, separators=(",", ":")).encode()

    # -- reading -----------------------------------------------------------------

    def _decode(self, raw: bytes) -> ElectionState:
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._corrupt(f"not JSON ({exc})") from exc
        if not isinstance(document, dict):
            raise self._corrupt("not a JSON object")
        version = self._int(document, "data_version", required=False, default=0)
        if version not in (0, 1):
            raise self._corrupt(f"unknown data_version {version}")
        epoch = self._int(document, "leaderEpoch")
        leader = self._int(document, "leaderId")
        voted = self._int(document, "votedId")
        if epoch < 0:
            raise self._corrupt(f"negative leaderEpoch {epoch}")
        for name, value in (("leaderId", leader), ("votedId", voted)):
            if value < _NONE:
                raise self._corrupt(f"{name} {value} is neither a node id nor -1")
        recovering = document.get("raftlogRecovering", False)
        if not isinstance(recovering, bool):
            raise self._corrupt("raftlogRecovering is not a boolean")
        leader_id = None if leader == _NONE else leader
        voted_id = None if voted == _NONE else voted
        self._check_ids(leader_id, voted_id, error=None)
        return ElectionState(
            epoch=epoch, leader_id=leader_id, voted_id=voted_id, recovering=recovering
        )

    def _int(
        self, document: dict[str, Any], key: str, *, required: bool = True, default: int = 0
    ) -> int:
        if key not in document:
            if required:
                raise self._corrupt(f"missing {key}")
            return default
        value = document[key]
        # bool is an int in Python; JSON true is not a number.
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._corrupt(f"{key} is not an integer: {value!r}")
        if not -(2**31) <= value <= _INT32_MAX:
            raise self._corrupt(f"{key} out of int32 range: {value}")
        return value

    def _check_ids(
        self, leader_id: int | None, voted_id: int | None, *, error: type[ValueError] | None
    ) -> None:
        if not self.voters:
            return
        for name, value in (("leader", leader_id), ("voted", voted_id)):
            if value is not None and value not in self.voters:
                message = f"{name} id {value} is not a voter {list(self.voters)}"
                if error is not None:
                    raise error(message)
                raise self._corrupt(message)

    def _corrupt(self, reason: str) -> CorruptQuorumStateError:
        return CorruptQuorumStateError(self.path, reason)
