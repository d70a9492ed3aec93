"""`QuorumController`: routes commands, writes their records, replays committed ones.

Contract (what the Raft integration can rely on, and must provide):

- **Listener.** The facade implements raftlog's consensus ``Listener``
  shape: ``handle_commit(batch)``, ``handle_load_snapshot(snapshot)``,
  ``handle_leader_change(leader)``. Committed batches arrive in offset
  order. They are replayed through `MetadataLoader` on every node, active
  or not: that is the only state change of the committed image.
- **Roles.** ``STANDBY`` -> ``CLAIMING`` when a leader change names this
  node; -> ``ACTIVE`` once a committed batch of the new leader epoch is
  replayed (the Raft leader's epoch-start LeaderChange record, KIP-595),
  because only then is every earlier record replayed, so commands see the
  whole log. Any leader change naming another node (or none), and a
  snapshot load while active, -> ``STANDBY``. Transitions happen only in
  `_transition_to_*` below.
- **Writes.** `submit` (active only, else `NotControllerError`) runs the
  command against the *latest* image: the committed image plus every
  record this controller has proposed and not yet seen committed (Kafka
  applies uncommitted records in memory too). If the command returns
  records, they are proposed as one call to ``MetadataLog.propose(values,
  now_ms)`` (``KRaftCore.propose``'s signature), which must return the
  offset of the last one; the first gets ``next_write_offset``, which the
  facade tracks from the claim batch on (a mismatch is a broken invariant:
  broker epochs are those offsets).
- **Responses.** `submit` returns a `Submission`. Send its ``response``
  only once `is_committed` holds, i.e. the committed offset has reached
  ``commit_offset``: the last offset of this command's records, or, for a
  command without records, of the last record proposed before it (Kafka
  purgatory). So no reply ever reports state that may still be lost. If
  leadership is lost first, the records may never commit: answer
  NOT_CONTROLLER.
- **Timers.** `tick(now_ms)` fences brokers whose session expired, and
  every ``leader.imbalance.check.interval`` runs preferred-leader
  rebalancing and unclean elections where allowed; with KIP-966 ELR on it
  writes a cluster-level ``min.insync.replicas`` if there is none
  (`feature_control.elr_safety_records`). While delegation tokens are
  enabled it removes expired ones every
  ``delegation.token.expiry.check.interval.ms``, the first time one
  interval after becoming active. It returns the next deadline. Sessions
  are soft state; a newly active controller starts every registered broker
  with a fresh session.
- **Failover.** Losing leadership drops uncommitted in-memory state: the
  latest image is reset to the committed image (hot standby: no reload).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Protocol, TypeVar, overload

from metadata_quorum.bootstrap import BOOTSTRAP_FEATURE, bootstrap_batch
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.features import elr_enabled
from metadata_quorum.image import (
    CLUSTER_DEFAULT_RESOURCE,
    EMPTY_IMAGE,
    MetadataImage,
    MetadataProvenance,
)
from metadata_quorum.loader import CommittedBatchLike, MetadataLoader, SnapshotLike
from metadata_quorum.records import MetadataRecord, encode_records
from raftlog.net.errors import ErrorCode

from .acl_control import (
    AclCreationResult,
    CreateAclsRequest,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    create_acls,
    delete_acls,
)
from .client_quota_control import (
    AlterClientQuotasRequest,
    ClientQuotaAlterationResult,
    alter_client_quotas,
)
from .cluster_control import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    broker_heartbeat,
    fence_stale_brokers,
    register_broker,
    unregister_broker,
)
from .configuration_control import (
    MIN_INSYNC_REPLICAS,
    AlterConfigsRequest,
    AlterConfigsResourceResult,
    alter_configs,
)
from .delegation_token_control import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResult,
    DelegationTokenExpiryResult,
    ExpireDelegationTokenRequest,
    RenewDelegationTokenRequest,
    create_delegation_token,
    expire_delegation_token,
    renew_delegation_token,
    sweep_expired_delegation_tokens,
)
from .feature_control import (
    UpdateFeaturesRequest,
    UpdateFeaturesResult,
    elr_safety_records,
    update_features,
)
from .producer_id_control import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    allocate_producer_ids,
)
from .reassignment import (
    AlterReassignmentsRequest,
    ReassignmentResult,
    alter_partition_reassignments,
)
from .replication_control import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    DeletableTopicResult,
    DeleteTopicsRequest,
    ElectLeadersPartitionResult,
    ElectLeadersRequest,
    alter_partition,
    balance_partition_leaders,
    create_partitions,
    create_topics,
    delete_topics,
    elect_leaders,
    elect_unclean_leaders,
)
from .result import MAX_RECORDS_PER_BATCH, ControllerConfig, ControllerResult
from .scram_control import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResult,
    alter_user_scram_credentials,
)
from .sessions import BrokerSessions

__all__ = [
    "ControllerInvariantError",
    "ControllerRequest",
    "ControllerRole",
    "LeaderAndEpochLike",
    "MetadataLog",
    "NotControllerError",
    "QuorumController",
    "Submission",
]


R = TypeVar("R")


class MetadataLog(Protocol):
    """Where the active controller appends records (``KRaftCore.propose``)."""

    def propose(self, values: Sequence[bytes], now_ms: int) -> int: ...


class LeaderAndEpochLike(Protocol):
    """raftlog.consensus.ready.LeaderAndEpoch, structurally."""

    @property
    def leader_id(self) -> int | None: ...
    @property
    def epoch(self) -> int: ...


class ControllerRole(Enum):
    STANDBY = 0
    CLAIMING = 1
    ACTIVE = 2


class NotControllerError(Exception):
    """Caller misuse: a command was sent to a controller that is not active.

    Answer the client NOT_CONTROLLER with ``leader_id`` (None if unknown).
    """

    error_code = ErrorCode.not_controller

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the active controller (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class ControllerInvariantError(Exception):
    """A broken invariant (tier 3): stop the node."""


class CommandFailedError(Exception):
    """A command raised while working out its records, before anything was
    proposed: a request the command's checks let through but its records
    cannot carry (a bug to fix where the command checks its input). The
    controller's state is as before; the caller answers the request
    UNKNOWN_SERVER_ERROR, and the node goes on, since a peer's request must
    not stop it."""


@dataclass(frozen=True, slots=True)
class Submission(Generic[R]):
    """A command's response, to be sent once ``commit_offset`` is committed."""

    response: R
    records: tuple[MetadataRecord, ...]
    commit_offset: int


ControllerRequest = (
    BrokerRegistrationRequest
    | BrokerHeartbeatRequest
    | UnregisterBrokerRequest
    | CreateTopicsRequest
    | CreatePartitionsRequest
    | DeleteTopicsRequest
    | AlterPartitionRequest
    | AlterConfigsRequest
    | AllocateProducerIdsRequest
    | ElectLeadersRequest
    | AlterReassignmentsRequest
    | AlterClientQuotasRequest
    | AlterUserScramCredentialsRequest
    | CreateAclsRequest
    | DeleteAclsRequest
    | UpdateFeaturesRequest
    | CreateDelegationTokenRequest
    | RenewDelegationTokenRequest
    | ExpireDelegationTokenRequest
)


class QuorumController:
    """One controller node's metadata state machine (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        config: ControllerConfig,
        log: MetadataLog,
        *,
        image: MetadataImage = EMPTY_IMAGE,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self._log = log
        self._loader = MetadataLoader(image)
        self._role = ControllerRole.STANDBY
        self._epoch = -1
        self._leader_id: int | None = None
        self._latest = image
        self._pending: list[int] = []  # last offsets of proposed, uncommitted writes
        self._next_write_offset = -1
        self._sessions: BrokerSessions | None = None
        self._next_balance_ms: int | None = None
        self._next_token_sweep_ms: int | None = None

    # --- state ---------------------------------------------------------------

    @property
    def role(self) -> ControllerRole:
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def committed_image(self) -> MetadataImage:
        return self._loader.image

    @property
    def latest_image(self) -> MetadataImage:
        """The committed image plus this controller's uncommitted records (active only)."""
        return self._latest if self._role is ControllerRole.ACTIVE else self._loader.image

    @property
    def last_committed_offset(self) -> int:
        return self._loader.image.provenance.last_offset

    @property
    def next_write_offset(self) -> int:
        """The offset the next proposed record will get (active only; else -1)."""
        return self._next_write_offset

    @property
    def sessions(self) -> BrokerSessions | None:
        return self._sessions

    def is_committed(self, submission: Submission[Any]) -> bool:
        """Whether ``submission.response`` may be sent."""
        return self.last_committed_offset >= submission.commit_offset

    # --- Raft listener ---------------------------------------------------------

    def handle_commit(self, batch: CommittedBatchLike) -> None:
        """Replay a committed batch; may complete a claim (-> ACTIVE)."""
        self._loader.handle_commit(batch)
        if self._role is ControllerRole.CLAIMING and batch.epoch >= self._epoch:
            self._transition_to_active(batch.last_offset + 1)
        elif self._role is ControllerRole.ACTIVE:
            if batch.epoch != self._epoch:
                raise ControllerInvariantError(
                    f"active in epoch {self._epoch}, but a batch of epoch {batch.epoch} "
                    f"committed at {batch.base_offset}"
                )
            while self._pending and self._pending[0] <= batch.last_offset:
                self._pending.pop(0)
            if not self._pending:
                if self.last_committed_offset != self._next_write_offset - 1:
                    raise ControllerInvariantError(
                        f"committed up to {self.last_committed_offset}, proposed up to "
                        f"{self._next_write_offset - 1}"
                    )
                self._latest = self._loader.image

    def handle_load_snapshot(self, snapshot: SnapshotLike) -> None:
        """Reset to a snapshot (never happens to an active controller in KRaft)."""
        self._loader.handle_load_snapshot(snapshot)
        if self._role is ControllerRole.ACTIVE:
            self._transition_to_standby(self._leader_id, self._epoch)
        self._latest = self._loader.image

    def handle_leader_change(self, leader: LeaderAndEpochLike) -> None:
        """Claim when the Raft leader is this node; otherwise stand by."""
        if leader.leader_id == self.node_id:
            if self._role is ControllerRole.STANDBY or leader.epoch > self._epoch:
                self._transition_to_claiming(leader.epoch)
        else:
            self._transition_to_standby(leader.leader_id, leader.epoch)

    # --- role transitions --------------------------------------------------------
    # STANDBY -> CLAIMING (leader change names us), CLAIMING -> ACTIVE (a batch
    # of our epoch committed), any -> STANDBY (leader elsewhere, or snapshot
    # load while active), CLAIMING/ACTIVE -> CLAIMING (a newer epoch of ours).

    def _transition_to_claiming(self, epoch: int) -> None:
        if epoch < self._epoch:
            raise ControllerInvariantError(f"claim of epoch {epoch} after epoch {self._epoch}")
        self._reset_uncommitted()
        self._role, self._epoch, self._leader_id = ControllerRole.CLAIMING, epoch, self.node_id

    def _transition_to_active(self, next_write_offset: int) -> None:
        if self._role is not ControllerRole.CLAIMING:
            raise ControllerInvariantError(f"activation from {self._role}")
        self._role = ControllerRole.ACTIVE
        self._latest = self._loader.image
        self._next_write_offset = next_write_offset
        self._sessions = None  # fresh sessions at the first now_ms (see _sessions_at)
        self._next_balance_ms = None
        self._next_token_sweep_ms = None

    def _transition_to_standby(self, leader_id: int | None, epoch: int) -> None:
        self._reset_uncommitted()
        self._role, self._leader_id = ControllerRole.STANDBY, leader_id
        self._epoch = max(self._epoch, epoch)

    def _reset_uncommitted(self) -> None:
        self._latest = self._loader.image
        self._pending.clear()
        self._next_write_offset = -1
        self._sessions = None

    # --- commands ------------------------------------------------------------

    @overload
    def submit(
        self, request: BrokerRegistrationRequest, now_ms: int
    ) -> Submission[BrokerRegistrationResponse]: ...
    @overload
    def submit(
        self, request: BrokerHeartbeatRequest, now_ms: int
    ) -> Submission[BrokerHeartbeatResponse]: ...
    @overload
    def submit(
        self, request: UnregisterBrokerRequest, now_ms: int
    ) -> Submission[UnregisterBrokerResponse]: ...
    @overload
    def submit(
        self, request: CreateTopicsRequest, now_ms: int
    ) -> Submission[tuple[CreatableTopicResult, ...]]: ...
    @overload
    def submit(
        self, request: CreatePartitionsRequest, now_ms: int
    ) -> Submission[tuple[CreatePartitionsTopicResult, ...]]: ...
    @overload
    def submit(
        self, request: ElectLeadersRequest, now_ms: int
    ) -> Submission[tuple[ElectLeadersPartitionResult, ...]]: ...
    @overload
    def submit(
        self, request: AlterReassignmentsRequest, now_ms: int
    ) -> Submission[tuple[ReassignmentResult, ...]]: ...
    @overload
    def submit(
        self, request: DeleteTopicsRequest, now_ms: int
    ) -> Submission[tuple[DeletableTopicResult, ...]]: ...
    @overload
    def submit(
        self, request: AlterPartitionRequest, now_ms: int
    ) -> Submission[AlterPartitionResponse]: ...
    @overload
    def submit(
        self, request: AlterConfigsRequest, now_ms: int
    ) -> Submission[tuple[AlterConfigsResourceResult, ...]]: ...
    @overload
    def submit(
        self, request: AllocateProducerIdsRequest, now_ms: int
    ) -> Submission[AllocateProducerIdsResponse]: ...
    @overload
    def submit(
        self, request: AlterClientQuotasRequest, now_ms: int
    ) -> Submission[tuple[ClientQuotaAlterationResult, ...]]: ...
    @overload
    def submit(
        self, request: AlterUserScramCredentialsRequest, now_ms: int
    ) -> Submission[tuple[AlterUserScramCredentialsResult, ...]]: ...
    @overload
    def submit(
        self, request: CreateAclsRequest, now_ms: int
    ) -> Submission[tuple[AclCreationResult, ...]]: ...
    @overload
    def submit(
        self, request: DeleteAclsRequest, now_ms: int
    ) -> Submission[tuple[DeleteAclsFilterResult, ...]]: ...

    @overload
    def submit(
        self, request: UpdateFeaturesRequest, now_ms: int
    ) -> Submission[UpdateFeaturesResult]: ...
    @overload
    def submit(
        self, request: CreateDelegationTokenRequest, now_ms: int
    ) -> Submission[CreateDelegationTokenResult]: ...
    @overload
    def submit(
        self, request: RenewDelegationTokenRequest | ExpireDelegationTokenRequest, now_ms: int
    ) -> Submission[DelegationTokenExpiryResult]: ...

    def submit(self, request: ControllerRequest, now_ms: int) -> Submission[Any]:
        """Run one command and propose its records. Raises `NotControllerError`
        unless active; `ControllerInvariantError` if the log assigns offsets
        other than expected."""
        if self._role is not ControllerRole.ACTIVE:
            raise NotControllerError(self._leader_id, self._epoch)
        try:
            result = self._command(request, now_ms)
        except Exception as exc:
            raise CommandFailedError(f"{type(request).__name__}: {exc!r}") from exc
        return self._write(result, now_ms)

    def _command(self, request: ControllerRequest, now_ms: int) -> ControllerResult[Any]:
        """``request``'s records and response, from the latest image; nothing
        is proposed (broker sessions are touched on success)."""
        sessions = self._sessions_at(now_ms)
        image, config = self._latest, self.config
        result: ControllerResult[Any]
        match request:
            case BrokerRegistrationRequest():
                result = register_broker(
                    image, sessions, request, config,
                    next_offset=self._next_write_offset, now_ms=now_ms,
                )
                if result.response.error is ErrorCode.none:
                    self._sessions = sessions.touched(request.broker_id, now_ms)
            case BrokerHeartbeatRequest():
                result = broker_heartbeat(image, request, config)
                if result.response.error is ErrorCode.none:
                    self._sessions = sessions.touched(request.broker_id, now_ms)
            case UnregisterBrokerRequest():
                result = unregister_broker(image, request, config)
                if result.response.error is ErrorCode.none:
                    self._sessions = sessions.without(request.broker_id)
            case CreateTopicsRequest():
                result = create_topics(
                    image, request, config, next_offset=self._next_write_offset
                )
            case CreatePartitionsRequest():
                result = create_partitions(image, request)
            case ElectLeadersRequest():
                result = elect_leaders(image, request, config)
            case AlterReassignmentsRequest():
                result = alter_partition_reassignments(image, request)
            case DeleteTopicsRequest():
                result = delete_topics(image, request, config)
            case AlterPartitionRequest():
                result = alter_partition(image, request, config)
            case AlterConfigsRequest():
                result = alter_configs(image, request)
            case AllocateProducerIdsRequest():
                result = allocate_producer_ids(image, request, config)
            case AlterClientQuotasRequest():
                result = alter_client_quotas(image, request)
            case AlterUserScramCredentialsRequest():
                result = alter_user_scram_credentials(image, request)
            case CreateAclsRequest():
                result = create_acls(image, request, config, next_offset=self._next_write_offset)
            case DeleteAclsRequest():
                result = delete_acls(image, request)
            case UpdateFeaturesRequest():
                result = update_features(image, request, config)
            case CreateDelegationTokenRequest():
                result = create_delegation_token(
                    image, request, config, next_offset=self._next_write_offset, now_ms=now_ms)
            case RenewDelegationTokenRequest():
                result = renew_delegation_token(image, request, config, now_ms=now_ms)
            case ExpireDelegationTokenRequest():
                result = expire_delegation_token(image, request, config, now_ms=now_ms)
        return result

    def tick(self, now_ms: int) -> int:
        """Run timers (active only) and return the next deadline in ms."""
        if self._role is not ControllerRole.ACTIVE:
            return now_ms + self.config.broker_session_timeout_ms
        if self.config.bootstrap_records and BOOTSTRAP_FEATURE not in self._latest.features:
            # KIP-900: the cluster's first active controller writes them once.
            self._write(ControllerResult(bootstrap_batch(self.config.bootstrap_records), None),
                        now_ms)
        if elr_enabled(self._latest) and MIN_INSYNC_REPLICAS not in self._latest.config(
                CLUSTER_DEFAULT_RESOURCE):
            # KIP-966: with ELR on there is a cluster-level min.insync.replicas
            # (a new cluster's first, or one whose log predates the rule).
            self._write(ControllerResult(tuple(elr_safety_records(self._latest, self.config)),
                                         None), now_ms)
        sessions = self._sessions_at(now_ms)
        self._write(fence_stale_brokers(self._latest, sessions, self.config, now_ms), now_ms)
        if self._next_balance_ms is None:
            self._next_balance_ms = now_ms + self.config.leader_imbalance_check_interval_ms
        elif now_ms >= self._next_balance_ms:
            self._write(elect_unclean_leaders(self._latest, self.config), now_ms)
            self._write(balance_partition_leaders(self._latest, self.config), now_ms)
            self._next_balance_ms = now_ms + self.config.leader_imbalance_check_interval_ms
        deadline = self._next_balance_ms
        sweep_ms = self._maybe_sweep_delegation_tokens(now_ms)
        if sweep_ms is not None:
            deadline = min(deadline, sweep_ms)
        timeout = self.config.broker_session_timeout_ms
        for broker in self._latest.brokers.values():
            if not broker.fenced:
                last = sessions.last_contact_ms.get(broker.broker_id, now_ms)
                deadline = min(deadline, last + timeout)
        return max(deadline, now_ms + 1)

    def _maybe_sweep_delegation_tokens(self, now_ms: int) -> int | None:
        """Every ``delegation.token.expiry.check.interval.ms`` while tokens are
        enabled, remove the expired ones (Kafka's controller schedules the
        same sweep). Returns the next sweep's deadline, or None when off."""
        settings = self.config.delegation_tokens
        if not settings.enabled:
            return None
        if self._next_token_sweep_ms is None:
            self._next_token_sweep_ms = now_ms + settings.expiry_check_interval_ms
        elif now_ms >= self._next_token_sweep_ms:
            self._write(ControllerResult(
                sweep_expired_delegation_tokens(self._latest, now_ms=now_ms), None), now_ms)
            self._next_token_sweep_ms = now_ms + settings.expiry_check_interval_ms
        return self._next_token_sweep_ms

    def _sessions_at(self, now_ms: int) -> BrokerSessions:
        if self._sessions is None:
            # Kafka's new active controller gives every broker a fresh session.
            self._sessions = BrokerSessions.fresh(self._latest.brokers, now_ms)
        return self._sessions

    def _write(self, result: ControllerResult[Any], now_ms: int) -> Submission[Any]:
        records = result.records
        if records:
            # Chunks of controller.max.records.per.batch, proposed in order
            # (KIP-868: large results are not atomic; every command orders its
            # records so that each prefix keeps the KIP-841 invariants).
            for start in range(0, len(records), MAX_RECORDS_PER_BATCH):
                chunk = records[start : start + MAX_RECORDS_PER_BATCH]
                first = self._next_write_offset
                last = self._log.propose(encode_records(chunk), now_ms)
                if last != first + len(chunk) - 1:
                    raise ControllerInvariantError(
                        f"expected records at {first}..{first + len(chunk) - 1}, log says {last}"
                    )
                self._pending.append(last)
                self._next_write_offset = last + 1
            delta = MetadataDelta(self._latest)
            for record in records:
                delta.replay(record)
            self._latest = delta.apply(
                MetadataProvenance(self._next_write_offset - 1, self._epoch)
            )
        return Submission(result.response, records, self._next_write_offset - 1)
