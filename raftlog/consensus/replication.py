"""Replication: Fetch and FetchSnapshot on both sides (KIP-595, KIP-630).

Leader side: validate (fetch offset, last fetched epoch) against the log,
answer with records, a DivergingEpoch or a snapshot id, long-poll empty
fetches ("parked" until new data, a HW change or ``max_wait_ms``), and move
the high watermark from voters' fetch offsets. An empty fetch whose sender
knows a lower HW than the leader's is answered at once (KIP-1166): the
acknowledging fetch that moves the HW would otherwise park until
``max_wait_ms``, and every replica, brokers included, would see a committed
change up to half a second late.

Follower side: one outstanding request at a time; append what the leader
sends, truncate on divergence, download a snapshot when below the leader's
log start, and learn the HW.
"""

from __future__ import annotations

import logging

from raftlog.consensus.base import CoreBase, Outstanding
from raftlog.consensus.errors import Errors, InvariantError
from raftlog.consensus.leader import LeaderState
from raftlog.consensus.log import OffsetAndEpoch
from raftlog.consensus.messages import (
    ANONYMOUS_REPLICA,
    DivergingEpoch,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from raftlog.consensus.ready import SnapshotLoad
from raftlog.consensus.roles import FollowerState, UnattachedState, VotedState
from raftlog.consensus.snapshot import SnapshotId
from raftlog.records import RecordError, iter_batches

log = logging.getLogger(__name__)


class ReplicationMixin(CoreBase):
    """Fetch / FetchSnapshot handling and the leader's append path."""

    # ===================== leader side =====================================

    def handle_fetch_request(self, src: int, cid: int, req: FetchRequest, now_ms: int) -> None:
        role = self.quorum.role
        error = self._validate_leader_request(req.leader_epoch)
        if error is not Errors.NONE or not isinstance(role, LeaderState):
            self._respond(src, cid, self._fetch_error(error))
            return
        if req.replica_id not in (src, ANONYMOUS_REPLICA) or src == self.node_id:
            self._respond(src, cid, self._fetch_error(Errors.INVALID_REQUEST))
            return
        kind = self._validate_offset_and_epoch(req.fetch_offset, req.last_fetched_epoch)
        if isinstance(kind, SnapshotId):
            self._respond(src, cid, FetchResponse(
                Errors.NONE, role.epoch, self.node_id, self._high_watermark,
                self.log.start_offset(), snapshot_id=kind))
            return
        if isinstance(kind, OffsetAndEpoch):
            self._respond(src, cid, FetchResponse(
                Errors.NONE, role.epoch, self.node_id, self._high_watermark,
                self.log.start_offset(),
                diverging_epoch=DivergingEpoch(kind.epoch, kind.offset)))
            return
        if req.replica_id != ANONYMOUS_REPLICA and role.update_replica(
                req.replica_id, req.fetch_offset, self.log.end_offset(), now_ms):
            self._on_high_watermark_change(role, now_ms)
        replaced = self._parked.pop(src, None)
        if replaced is not None:
            # One parked fetch per source: answer the older one now (it is
            # stale for the fetcher, but every request gets its response).
            self._answer_fetch(role, src, replaced[0], replaced[1])
        if (req.fetch_offset >= self.log.end_offset() and req.max_wait_ms > 0
                and req.high_watermark >= self._high_watermark):
            # Long poll: answer when data arrives, the HW moves, or at max wait.
            self._parked[src] = (cid, req, now_ms + req.max_wait_ms)
            return
        self._answer_fetch(role, src, cid, req)

    def _answer_orphaned_fetches(self) -> None:
        """Answer the fetches parked by a leadership that has ended, with the
        current epoch and leader as hints (Kafka's NOT_LEADER_OR_FOLLOWER)."""
        orphaned, self._orphaned_fetches = self._orphaned_fetches, []
        for dst, cid in orphaned:
            self._respond(dst, cid, self._fetch_error(Errors.NOT_LEADER_OR_FOLLOWER))

    def _validate_leader_request(self, request_epoch: int) -> Errors:
        """Kafka's validateLeaderOnlyRequest."""
        if request_epoch < self.quorum.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if request_epoch > self.quorum.epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        if not isinstance(self.quorum.role, LeaderState):
            return Errors.NOT_LEADER_OR_FOLLOWER
        return Errors.NONE

    def _fetch_error(self, error: Errors) -> FetchResponse:
        return FetchResponse(error, self.quorum.epoch, self._leader_id_or_none(), -1,
                             self.log.start_offset())

    def _validate_offset_and_epoch(self, fetch_offset: int,
                                   last_fetched_epoch: int) -> OffsetAndEpoch | SnapshotId | None:
        """None if (offset, epoch) matches our log; else where the fetcher
        diverges (DivergingEpoch) or the snapshot it must load instead."""
        start = self.log.start_offset()
        snapshot_id = self.log.latest_snapshot_id()
        start_epoch = snapshot_id.epoch if snapshot_id is not None else 0
        if fetch_offset < start:
            if snapshot_id is None:
                raise InvariantError(f"log start {start} > 0 without a snapshot")
            return snapshot_id
        if fetch_offset == start and last_fetched_epoch == start_epoch:
            return None
        end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if end.epoch == last_fetched_epoch and end.offset >= fetch_offset:
            return None
        if end.offset <= start and start > 0 and snapshot_id is not None:
            # The divergence is inside the snapshot: only the snapshot helps.
            return snapshot_id
        return end

    def _answer_fetch(self, role: LeaderState, dst: int, cid: int, req: FetchRequest) -> None:
        records = b""
        if req.fetch_offset < self.log.end_offset():
            records = self.log.read(req.fetch_offset, req.max_bytes)
        self._respond(dst, cid, FetchResponse(Errors.NONE, role.epoch, self.node_id,
                                              self._high_watermark, self.log.start_offset(),
                                              records=records))

    def _complete_parked_fetches(self, role: LeaderState) -> None:
        for dst in sorted(self._parked):
            cid, req, _ = self._parked[dst]
            self._answer_fetch(role, dst, cid, req)
        self._parked.clear()

    def _expire_parked_fetches(self, role: LeaderState, now_ms: int) -> None:
        expired = sorted(d for d, (_, _, deadline) in self._parked.items() if now_ms >= deadline)
        for dst in expired:
            cid, req, _ = self._parked.pop(dst)
            self._answer_fetch(role, dst, cid, req)

    def _on_high_watermark_change(self, role: LeaderState, now_ms: int) -> None:
        self._raise_high_watermark(role.high_watermark)
        self._complete_parked_fetches(role)

    def _append_batches(self, role: LeaderState, batches: list[bytes], now_ms: int) -> None:
        for batch in batches:
            expected = self.log.end_offset()
            info = self.log.append_as_leader(batch, role.epoch, now_ms)
            if info.first_offset != expected:
                raise InvariantError(f"append at {info.first_offset}, expected {expected}")
        if batches:
            self._complete_parked_fetches(role)

    def handle_fetch_snapshot_request(self, src: int, cid: int, req: FetchSnapshotRequest,
                                      now_ms: int) -> None:
        role = self.quorum.role
        error = self._validate_leader_request(req.leader_epoch)
        if error is not Errors.NONE or not isinstance(role, LeaderState):
            self._respond(src, cid, FetchSnapshotResponse(error, self.quorum.epoch,
                                                          self._leader_id_or_none()))
            return
        if req.replica_id in self.config.voters and req.replica_id == src:
            role.record_contact(req.replica_id)
        data = self.log.read_snapshot(req.snapshot_id)
        if data is None:
            self._respond(src, cid, FetchSnapshotResponse(Errors.SNAPSHOT_NOT_FOUND, role.epoch,
                                                          self.node_id))
            return
        if req.position > len(data):
            self._respond(src, cid, FetchSnapshotResponse(Errors.POSITION_OUT_OF_RANGE,
                                                          role.epoch, self.node_id))
            return
        chunk = data[req.position:req.position + min(req.max_bytes,
                                                     self.config.fetch_snapshot_max_bytes)]
        self._respond(src, cid, FetchSnapshotResponse(
            Errors.NONE, role.epoch, self.node_id, req.snapshot_id, len(data), req.position,
            chunk))

    # ===================== follower / observer side ===========================

    def _maybe_send_fetch(self, now_ms: int) -> None:
        """Keep exactly one Fetch (or FetchSnapshot) outstanding to the leader;
        observers without a leader ask a random voter who leads."""
        if self._fetch is not None or now_ms < self._next_fetch_ms:
            return
        role = self.quorum.role
        replica_id = self.node_id if self.quorum.is_voter else ANONYMOUS_REPLICA
        if self.node_id not in self.config.voters:
            replica_id = self.node_id  # an observer with an id (shown by DescribeQuorum)
        if isinstance(role, FollowerState):
            destination = role.leader_id
            if role.snapshot_fetching is not None:
                body: FetchRequest | FetchSnapshotRequest = FetchSnapshotRequest(
                    replica_id, role.epoch, role.snapshot_fetching, len(role.snapshot_buffer),
                    self.config.fetch_snapshot_max_bytes)
            else:
                body = self._fetch_request(replica_id, role.epoch)
        elif not self.quorum.is_voter and isinstance(role, UnattachedState | VotedState):
            voters = self.config.sorted_voters()
            destination = voters[self._rng.randrange(len(voters))]
            if destination == self.node_id:
                return
            body = self._fetch_request(replica_id, role.epoch)
        else:
            return
        cid = self._send(destination, body)
        expires = now_ms + self.config.request_timeout_ms
        if isinstance(body, FetchRequest):
            expires += body.max_wait_ms
        self._fetch = Outstanding(destination, cid, expires)

    def _fetch_request(self, replica_id: int, epoch: int) -> FetchRequest:
        # The fetch offset acknowledges every record below it: the Ready that
        # carries this request flushes the log up to the LEO first.
        return FetchRequest(replica_id, epoch, self.log.end_offset(),
                            self.log.last_fetched_epoch(), self.config.fetch_max_wait_ms,
                            self.config.fetch_max_bytes, high_watermark=self._high_watermark)

    def _accept_response(self, src: int, cid: int) -> bool:
        outstanding = self._fetch
        if outstanding is None or outstanding.correlation_id != cid \
                or outstanding.destination != src:
            return False
        self._fetch = None
        return True

    def handle_fetch_response(self, src: int, cid: int, resp: FetchResponse, now_ms: int) -> None:
        if not self._accept_response(src, cid):
            return
        if self._maybe_handle_common_response(resp.leader_epoch, resp.leader_id, now_ms):
            return
        role = self.quorum.role
        if resp.error is not Errors.NONE or not isinstance(role, FollowerState) \
                or role.leader_id != src or resp.leader_epoch != role.epoch:
            self._note_fetch_failure(src, resp.error)
            self._next_fetch_ms = now_ms + self.config.retry_backoff_ms
            return
        if not self._apply_fetch_response(role, src, resp):
            # Bad input from the leader (STYLE.md section 8, tier 1): drop it,
            # keep the fetch timeout running, and fetch again after a backoff.
            self._next_fetch_ms = now_ms + self.config.retry_backoff_ms
            return
        role.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        role.has_fetched_from_leader = True
        role.leader_unreachable = False
        self._next_fetch_ms = now_ms

    def _note_fetch_failure(self, src: int, error: Errors) -> None:
        """The runtime reports a refused or lost connection as
        BROKER_NOT_AVAILABLE and a timeout as REQUEST_TIMED_OUT (Kafka's
        KafkaNetworkChannel); a resigned leader answers NOT_LEADER_OR_FOLLOWER.
        The leader is then not known to be alive, so this follower stops
        vetoing pre-votes on its behalf."""
        role = self.quorum.role
        if isinstance(role, FollowerState) and role.leader_id == src and error in (
                Errors.BROKER_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT,
                Errors.NOT_LEADER_OR_FOLLOWER):
            role.leader_unreachable = True

    def _apply_fetch_response(self, role: FollowerState, src: int, resp: FetchResponse) -> bool:
        """Apply a successful Fetch answer; False (logged) if it makes no sense."""
        if resp.diverging_epoch is not None:
            return self._truncate_to_diverging_epoch(src, resp.diverging_epoch)
        if resp.snapshot_id is not None:
            if resp.snapshot_id.end_offset < self._applied_offset:
                log.warning("node %d: leader %d offers snapshot %s below the applied offset %d;"
                            " ignored", self.node_id, src, resp.snapshot_id,
                            self._applied_offset)
                return False
            role.snapshot_fetching = resp.snapshot_id
            role.snapshot_buffer = bytearray()
            return True
        if resp.records and not self._append_as_follower(role, src, resp.records):
            return False
        if resp.high_watermark >= 0:
            self._raise_high_watermark(resp.high_watermark)
        self._maybe_finish_recovery(role)
        return True

    def _append_as_follower(self, role: FollowerState, src: int, records: bytes) -> bool:
        """Append fetched batches; False (logged) if they are corrupt, from a
        later epoch than the leader's, or do not continue the log."""
        try:
            first = next(iter_batches(records, validate_crc=False), None)
            if first is None or first[0].base_offset != self.log.end_offset():
                return True  # not what we asked for: fetch again from the LEO
            for header, _ in iter_batches(records, validate_crc=False):
                if header.partition_leader_epoch > role.epoch:
                    raise ValueError(f"batch of epoch {header.partition_leader_epoch} from the"
                                     f" leader of epoch {role.epoch}")
            self.log.append_as_follower(records)
        except (ValueError, RecordError) as exc:
            log.warning("node %d: bad records fetched from %d at offset %d: %s",
                        self.node_id, src, self.log.end_offset(), exc)
            return False
        return True

    def _truncate_to_diverging_epoch(self, src: int, diverging: DivergingEpoch) -> bool:
        """Kafka's ReplicatedLog.truncateToEndOffset: cut at the leader's end
        offset for the epoch, or at our own end of that epoch if earlier.
        A divergence below our committed (applied) offset cannot come from a
        correct leader: it is logged and dropped (False), not obeyed."""
        if diverging.epoch == 0:
            target = min(diverging.end_offset, self.log.end_offset())
        else:
            local = self.log.end_offset_for_epoch(diverging.epoch)
            if local.epoch == diverging.epoch:
                target = min(local.offset, diverging.end_offset)
            else:
                target = local.offset
        if target < self._applied_offset:
            log.error("node %d: leader %d sent %s, which would truncate below the applied"
                      " (committed) offset %d; ignored", self.node_id, src, diverging,
                      self._applied_offset)
            return False
        if target < self.log.end_offset():
            self.log.truncate_to(target)
        return True

    def handle_fetch_snapshot_response(self, src: int, cid: int, resp: FetchSnapshotResponse,
                                       now_ms: int) -> None:
        if not self._accept_response(src, cid):
            return
        if self._maybe_handle_common_response(resp.leader_epoch, resp.leader_id, now_ms):
            return
        role = self.quorum.role
        if not isinstance(role, FollowerState) or role.snapshot_fetching is None:
            return
        if resp.error is not Errors.NONE or resp.snapshot_id != role.snapshot_fetching \
                or resp.position != len(role.snapshot_buffer):
            self._note_fetch_failure(src, resp.error)
            # Start over with a fresh Fetch (the leader may have a newer snapshot).
            role.snapshot_fetching = None
            role.snapshot_buffer = bytearray()
            self._next_fetch_ms = now_ms + self.config.retry_backoff_ms
            return
        role.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        role.snapshot_buffer += resp.unaligned_records
        self._next_fetch_ms = now_ms
        if len(role.snapshot_buffer) < resp.size:
            return
        snapshot_id = role.snapshot_fetching
        data = bytes(role.snapshot_buffer)
        role.snapshot_fetching = None
        role.snapshot_buffer = bytearray()
        self.log.store_snapshot(snapshot_id, data)
        self.log.truncate_to_snapshot(snapshot_id)
        self._events.append(SnapshotLoad(snapshot_id, data))
        self._applied_offset = snapshot_id.end_offset
        self._raise_high_watermark(snapshot_id.end_offset)

    def _maybe_finish_recovery(self, role: FollowerState) -> None:
        """A voter that lost its disk votes again once it holds everything the
        leader had committed when it caught up, and only with a leader elected
        after it came back (so any vote it forgot belongs to an older epoch it
        can no longer vote in). This narrows KAFKA-14077; formatting is the
        real fix (KIP-853)."""
        if not self.quorum.recovering or self._recovery_floor_epoch is None:
            return
        if role.epoch <= self._recovery_floor_epoch:
            return
        if self._high_watermark > 0 and self.log.end_offset() >= self._high_watermark:
            self.quorum.finish_recovery()

