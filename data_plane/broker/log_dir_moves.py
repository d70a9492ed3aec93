"""Moving a replica to another of the broker's log directories (Kafka's
AlterReplicaLogDirs and ``ReplicaAlterLogDirsThread``; JBOD).

A move builds a *future log* beside the replica's current one, in the
destination directory, named ``<topic>-<partition>.<id>-future``, and
copies the current log into it batch by batch, the way a follower copies
its leader: `Log.read` from the future log's end offset, then
`Log.append_as_follower`, with the replica's producer state kept alongside
(`ReplicaTxnState`). The replica goes on serving from its current log the
whole time (leading or following, with new appends), and the copy follows.

**Truncations.** When the current log is truncated (a follower's divergence,
a leader change) or loses segments (retention, DeleteRecords), its
``generation`` moves; the future log is then cut back to the last offset
where both logs hold the same leader epoch (records with the same epoch at
the same offset are the same records: KIP-101's rule), and to the current
log start.

**Swap.** Once the future log has everything the current one has, in one
step of the event loop (no other request runs in between): the future log
is synced and closed, the current log closed, the current directory renamed
to ``<topic>-<partition>.<id>-delete``, the future one to
``<topic>-<partition>``, and the replica reopens its log there and keeps the
future producer state. The old directory is then deleted. The log cleaner
does not clean a replica while it moves, and a swap waits for a cleaning
pass under way to end.

**Restarts.** A move a stop or crash interrupted resumes, as Kafka's does.
At start-up (`recover_moves`, before any replica is opened) a ``-delete``
directory is deleted, or renamed back when the replica's own directory is
missing (a crash between the two renames of a swap), and each ``-future``
directory is set aside. When the metadata assigns the replica to this
broker again and it is opened, its future log is reopened (recovery cuts a
torn tail) and the copy goes on from the future log's end, after the same
epoch check as a truncation: the current log may have been truncated while
the broker was down, or the future log may have lost an unsynced tail. A
future log the replica cannot take (another topic id, a directory that is
not a log dir now, or offline, or the replica's own) is deleted, and so is
one whose replica the first current metadata image does not assign here
(with the stray replicas, `log_dirs`).

**Throttle.** ``replica.alter.log.dirs.io.max.bytes.per.second`` (a
dynamic broker config, unbounded by default) bounds the bytes all moves
copy, measured over the replication quota window
(`data_plane.broker.replication_quotas`); while the rate is over it, the
moves wait.

The move is the broker's own: the metadata does not record which
directory holds a replica (KIP-858's directory assignment is not
implemented).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from data_plane.broker.log_dirs import write_topic_id
from data_plane.txn.replica_state import ReplicaTxnState
from raftlog.storage.epoch_cache import EpochEntry
from raftlog.storage.files import FileSystem
from raftlog.storage.log import Log

if TYPE_CHECKING:
    from data_plane.broker.replica_manager import HostedPartition, ReplicaManager

__all__ = (
    "LogDirMove",
    "LogDirMoves",
    "agreed_end_offset",
    "discard_future",
    "recover_moves",
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

FUTURE_SUFFIX: Final = "-future"
DELETE_SUFFIX: Final = "-delete"
_MOVE_DIR: Final = re.compile(r"^(?P<name>.+-\d+)\.(?P<id>[0-9a-f]{32})(?P<kind>-future|-delete)$")
#: Bytes copied per step before the move yields to the event loop.
COPY_CHUNK_BYTES: Final = 1024 * 1024
#: How long the moves wait while their bound is exceeded before looking again.
QUOTA_BACKOFF_S: Final = 0.1


def _chunk_bytes(bound: int | None) -> int:
    """A step's read size: at most a second's worth of the moves' bound, so
    that a low bound is not overshot by a whole chunk (one batch is still
    read whole, whatever its size)."""
    return COPY_CHUNK_BYTES if bound is None else max(1, min(COPY_CHUNK_BYTES, bound))


def agreed_end_offset(future: Sequence[EpochEntry], future_end: int,
                      current: Sequence[EpochEntry], current_end: int) -> int:
    """The end of the prefix both logs agree on: the first offset below both
    log ends where their leader epochs differ (or an epoch starts in one and
    not the other), else the smaller log end. Epochs change only where an
    entry starts, so comparing at every entry's start offset is enough."""
    limit = min(future_end, current_end)
    starts = sorted({e.start_offset for e in future} | {e.start_offset for e in current})
    for offset in starts:
        if offset >= limit:
            break
        if _epoch_at(future, offset) != _epoch_at(current, offset):
            return offset
    return limit


def _epoch_at(entries: Sequence[EpochEntry], offset: int) -> int | None:
    epoch = None
    for entry in entries:
        if entry.start_offset > offset:
            break
        epoch = entry.epoch
    return epoch


@dataclass(slots=True)
class LogDirMove:
    """One replica's move in progress."""

    key: TopicPartition
    destination: str  # the log dir it goes to
    future_dir: str
    future_log: Log
    future_txn: ReplicaTxnState
    seen_generation: int
    task: asyncio.Task[None] | None = None

    @property
    def future_end_offset(self) -> int:
        return self.future_log.log_end_offset


def _dir_id() -> str:
    return uuid.uuid4().hex


def recover_moves(fs: FileSystem, log_dirs: Iterable[str]) -> dict[str, str]:
    """At start-up, before any replica is opened: delete the old directories
    of finished moves, putting one back when its replica's directory is
    missing (a crash between a swap's two renames), and set aside the
    future logs of the moves a stop interrupted. Returns those, by replica
    directory name (``<topic>-<partition>``): the replicas resume them when
    opened (`LogDirMoves.resume`). Of two future logs for one replica (only
    a crash in the middle of replacing a move can leave them) the newer is
    kept."""
    dirs = list(log_dirs)
    futures: dict[str, list[str]] = {}
    for log_dir in dirs:
        try:
            names = fs.list_dir(log_dir)
        except FileNotFoundError:
            continue
        for name in sorted(names):
            match = _MOVE_DIR.match(name)
            if match is None:
                continue
            path = os.path.join(log_dir, name)
            replica = match["name"]
            if match["kind"] == FUTURE_SUFFIX:
                futures.setdefault(replica, []).append(path)
            elif not any(fs.exists(os.path.join(d, replica)) for d in dirs):
                fs.rename(path, os.path.join(log_dir, replica))
                log.warning("log dir moves: restored %s from %s (a swap was interrupted)",
                            replica, path)
            else:
                shutil.rmtree(path, ignore_errors=True)
                log.warning("log dir moves: deleted %s, the directory a finished move left",
                            path)
    pending: dict[str, str] = {}
    for replica, paths in sorted(futures.items()):
        paths.sort(key=_modified_ns)
        for stale in paths[:-1]:
            shutil.rmtree(stale, ignore_errors=True)
            log.warning("log dir moves: deleted %s, an older future log of %s", stale, replica)
        pending[replica] = paths[-1]
        log.info("log dir moves: %s resumes its move to %s when it is opened",
                 replica, os.path.dirname(paths[-1]))
    return pending


def _modified_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def discard_future(path: str, why: str) -> None:
    """Delete the set-aside future log ``path`` (`recover_moves`)."""
    shutil.rmtree(path, ignore_errors=True)
    log.warning("log dir moves: deleted the future log %s: %s", path, why)


class LogDirMoves:
    """The moves of one broker's replicas (`ReplicaManager.moves`)."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas
        self.moves: dict[TopicPartition, LogDirMove] = {}
        #: Moves completed since start.
        self.completed = 0

    # ---- starting and stopping -------------------------------------------------

    def start(self, key: TopicPartition, hosted: HostedPartition, destination: str) -> None:
        """Move ``hosted`` to the log dir ``destination`` (one of the
        broker's, online; the caller checked). Nothing to do when it is
        there already (a move elsewhere is cancelled) or already on its way
        there; a move to another directory is replaced."""
        current_dir = os.path.dirname(hosted.directory)
        existing = self.moves.get(key)
        if existing is not None:
            if existing.destination == destination:
                return
            self.cancel(key)
        if current_dir == destination:
            return
        name = os.path.basename(hosted.directory)
        future_dir = os.path.join(destination, f"{name}.{_dir_id()}{FUTURE_SUFFIX}")
        move = self._open_future(key, hosted, destination, future_dir, resumed=False)
        log.info("%s-%d: moving from %s to %s", key[0], key[1], current_dir, destination)
        self._begin(move)

    def resume(self, key: TopicPartition, hosted: HostedPartition, future_dir: str) -> None:
        """Go on with the move a stop interrupted (`recover_moves`): the
        future log ``future_dir`` was checked to belong to ``hosted`` and
        to sit in another online log dir. A future log that does not open
        is deleted, and the replica stays where it is."""
        destination = os.path.dirname(future_dir)
        try:
            move = self._open_future(key, hosted, destination, future_dir, resumed=True)
        except Exception as e:  # a damaged copy is only a copy: start over on request
            log.warning("%s-%d: cannot reopen the future log %s (%r); the move is dropped",
                        key[0], key[1], future_dir, e)
            shutil.rmtree(future_dir, ignore_errors=True)
            return
        log.info("%s-%d: resuming the move from %s to %s at offset %d", key[0], key[1],
                 os.path.dirname(hosted.directory), destination, move.future_end_offset)
        self._begin(move)

    def _open_future(self, key: TopicPartition, hosted: HostedPartition, destination: str,
                     future_dir: str, *, resumed: bool) -> LogDirMove:
        replicas = self._replicas
        current = hosted.partition.log
        future_log = Log.open(future_dir, current.config, fs=replicas.fs, clock=replicas.clock)
        try:
            if not resumed:
                write_topic_id(replicas.fs, future_dir, hosted.topic_id)
            future_txn = ReplicaTxnState(
                future_dir, replicas.fs,
                producer_id_expiration_ms=hosted.partition.txn.producers.producer_id_expiration_ms)
            if not resumed and current.log_start_offset > 0:
                future_log.truncate_fully_and_start_at(current.log_start_offset)
            future_txn.load(future_log)
            move = LogDirMove(key, destination, future_dir, future_log, future_txn,
                              seen_generation=current.generation)
            if resumed:
                # What the future log holds was copied before the stop: keep
                # the prefix both logs agree on, as after a truncation.
                self._reconcile(move, current)
        except BaseException:
            future_log.close(clean=False)
            raise
        return move

    def _begin(self, move: LogDirMove) -> None:
        self.moves[move.key] = move
        move.task = asyncio.get_running_loop().create_task(
            self._run(move), name=f"log-dir-move-{os.path.basename(move.future_dir)}")

    def cancel(self, key: TopicPartition) -> None:
        """Stop ``key``'s move, if any, and delete its future log."""
        move = self.moves.pop(key, None)
        if move is None:
            return
        if move.task is not None and move.task is not asyncio.current_task():
            move.task.cancel()
        move.future_log.close(clean=False)
        shutil.rmtree(move.future_dir, ignore_errors=True)
        log.info("%s-%d: the move to %s is cancelled", key[0], key[1], move.destination)

    async def close(self) -> None:
        """Stop every move (broker shutdown): they resume at the next start
        (`recover_moves`)."""
        tasks = [m.task for m in self.moves.values() if m.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for move in self.moves.values():
            try:
                move.future_log.close()  # synced: the copy resumes where it stopped
            except OSError as e:
                log.warning("%s-%d: the future log did not close cleanly (%s); it is "
                            "recovered when the move resumes", move.key[0], move.key[1], e)
                move.future_log.close(clean=False)
        self.moves.clear()

    # ---- copying ----------------------------------------------------------------

    async def _run(self, move: LogDirMove) -> None:
        key = move.key
        quota = self._replicas.replication_quotas.alter_log_dirs
        try:
            while self.moves.get(key) is move:
                if quota.active and quota.is_quota_exceeded(self._replicas.now_ms()):
                    # replica.alter.log.dirs.io.max.bytes.per.second: every
                    # move waits until the rate over the window is back under.
                    await asyncio.sleep(QUOTA_BACKOFF_S)
                    continue
                done = self.step(move, _chunk_bytes(quota.bound if quota.active else None))
                if done:
                    return
                # A full chunk copied: go on at once, after the loop's other
                # work; caught up but not swapped (a cleaning pass holds the
                # log): wait a little.
                await asyncio.sleep(0 if move.future_end_offset < self._current_end(move)
                                    else 0.05)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s-%d: the move to %s failed; the replica stays where it is",
                          key[0], key[1], move.destination)
            if self.moves.get(key) is move:
                self.cancel(key)

    def _current_end(self, move: LogDirMove) -> int:
        hosted = self._replicas.partitions.get(move.key)
        return -1 if hosted is None else hosted.partition.log.log_end_offset

    def step(self, move: LogDirMove, max_bytes: int = COPY_CHUNK_BYTES) -> bool:
        """Copy the next chunk, or swap once caught up; True when the move
        is over (swapped, or the replica is gone)."""
        hosted = self._replicas.partitions.get(move.key)
        if hosted is None:
            self.cancel(move.key)
            return True
        partition = hosted.partition
        current, future, txn = partition.log, move.future_log, move.future_txn
        if current.generation != move.seen_generation:
            move.seen_generation = current.generation
            self._reconcile(move, current)
        if future.log_end_offset < current.log_start_offset:
            future.truncate_fully_and_start_at(current.log_start_offset)
            txn.after_truncation(future)
        data = current.read(future.log_end_offset, max_bytes)
        if data.records:
            txn.note_segment(future)
            future.append_as_follower(data.records)
            txn.apply_appended_bytes(future, data.records)
            quota = self._replicas.replication_quotas.alter_log_dirs
            if quota.active:
                quota.record(len(data.records), self._replicas.now_ms())
        if future.log_end_offset != current.log_end_offset:
            return False  # more to copy
        # Caught up, in this same step: nothing can be appended before the
        # swap (under a steady load, a later step would always find more).
        if self._replicas.cleaner.cleaning == move.key:
            return False  # its log is being rewritten off the loop: after that pass
        self._swap(move, hosted)
        return True

    @staticmethod
    def _reconcile(move: LogDirMove, current: Log) -> None:
        future, txn = move.future_log, move.future_txn
        agreed = agreed_end_offset(future.epoch_entries, future.log_end_offset,
                                   current.epoch_entries, current.log_end_offset)
        if agreed < future.log_end_offset:
            future.truncate_to(agreed)
            txn.after_truncation(future)
        if current.log_start_offset > future.log_start_offset:
            if current.log_start_offset >= future.log_end_offset:
                future.truncate_fully_and_start_at(current.log_start_offset)
                txn.after_truncation(future)
            elif future.delete_records_before(current.log_start_offset):
                txn.after_log_start_moved(future)

    def _swap(self, move: LogDirMove, hosted: HostedPartition) -> None:
        """Make the caught-up future log the replica's (module docstring)."""
        replicas, fs = self._replicas, self._replicas.fs
        partition = hosted.partition
        current, future = partition.log, move.future_log
        key = move.key
        if current.log_start_offset > future.log_start_offset:
            future.delete_records_before(current.log_start_offset)
            move.future_txn.after_log_start_moved(future)
        future.set_first_dirty_offset(current.first_dirty_offset)
        future.close()  # synced, indexes written, clean
        current.close()
        final_dir = os.path.join(move.destination, os.path.basename(hosted.directory))
        old_dir = hosted.directory
        retired = f"{old_dir}.{_dir_id()}{DELETE_SUFFIX}"
        fs.rename(old_dir, retired)
        fs.rename(move.future_dir, final_dir)
        new_log = Log.open(final_dir, current.config, fs=fs, clock=replicas.clock)
        txn = move.future_txn
        txn.directory = final_dir
        txn.take_verifications_from(partition.txn)
        partition.log = new_log
        partition.txn = txn
        hosted.directory = final_dir
        del self.moves[key]
        self.completed += 1
        replicas.on_log_replaced(key)
        log.info("%s-%d: moved to %s (offsets %d..%d)", key[0], key[1], move.destination,
                 new_log.log_start_offset, new_log.log_end_offset)
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, shutil.rmtree, retired, True)
