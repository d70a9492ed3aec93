"""Delegation tokens (KIP-48) in the controller: Kafka's
DelegationTokenControlManager rules for create, renew, expire and the
expiry sweep, and the same commands and sweep through `QuorumController`."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest
from mq_builders import Ctx, apply_records

from metadata_quorum.controller import (
    ControllerConfig,
    ControllerResult,
    ControllerRole,
    CreateDelegationTokenRequest,
    CreateDelegationTokenResult,
    DelegationTokenExpiryResult,
    DelegationTokenSettings,
    ExpireDelegationTokenRequest,
    QuorumController,
    RenewDelegationTokenRequest,
    create_delegation_token,
    expire_delegation_token,
    renew_delegation_token,
    sweep_expired_delegation_tokens,
)
from metadata_quorum.controller.delegation_token_control import new_token_id
from metadata_quorum.delegation_tokens import token_hmac
from metadata_quorum.image import EMPTY_IMAGE
from metadata_quorum.records import (
    DelegationTokenRecord,
    RemoveDelegationTokenRecord,
    build_metadata_batch,
    decode_record,
)
from raftlog import kafka_uuid
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch
from raftlog.net.errors import ErrorCode
from raftlog.records import ControlRecordType, build_control_batch

SECRET = "s3cret"
ALICE, BOB, CAROL, ADMIN = "User:alice", "User:bob", "User:carol", "User:admin"
#: Short periods, so the arithmetic reads: lifetime 10 s, expiry 4 s, sweep every 1 s.
TOKENS = DelegationTokenSettings(secret_key=SECRET, max_lifetime_ms=10_000, expiry_time_ms=4_000,
                                 expiry_check_interval_ms=1_000)


def tokens_ctx(settings: DelegationTokenSettings = TOKENS) -> Ctx:
    return Ctx(ControllerConfig(cluster_id="test-cluster", delegation_tokens=settings))


def create(ctx: Ctx, requester: str = ALICE, *, owner: str | None = None,
           renewers: tuple[str, ...] = (), max_lifetime_ms: int = -1,
           ) -> CreateDelegationTokenResult:
    """Create at ``ctx.now_ms`` and replay its records, if any."""
    result = create_delegation_token(
        ctx.image, CreateDelegationTokenRequest(requester, owner, renewers, max_lifetime_ms),
        ctx.config, next_offset=ctx.next_offset, now_ms=ctx.now_ms)
    assert len(result.records) == (1 if result.response.error is ErrorCode.none else 0)
    response: CreateDelegationTokenResult = ctx.run(result)
    return response


def renew(ctx: Ctx, hmac: bytes, requester: str = ALICE, period_ms: int = -1,
          ) -> DelegationTokenExpiryResult:
    response: DelegationTokenExpiryResult = ctx.run(renew_delegation_token(
        ctx.image, RenewDelegationTokenRequest(requester, hmac, period_ms), ctx.config,
        now_ms=ctx.now_ms))
    return response


def expire(ctx: Ctx, hmac: bytes, requester: str = ALICE, period_ms: int = -1,
           ) -> DelegationTokenExpiryResult:
    response: DelegationTokenExpiryResult = ctx.run(expire_delegation_token(
        ctx.image, ExpireDelegationTokenRequest(requester, hmac, period_ms), ctx.config,
        now_ms=ctx.now_ms))
    return response


# --- CreateDelegationToken --------------------------------------------------------------


def test_create_writes_the_token_and_answers_its_hmac_and_timestamps() -> None:
    ctx = tokens_ctx()
    response = create(ctx, renewers=(BOB,))
    assert response.error is ErrorCode.none and response.message is None
    assert (response.owner, response.requester) == (ALICE, ALICE)
    # Issued now; max = now + max lifetime; expiry = now + expiry time (the smaller).
    assert (response.issue_timestamp, response.max_timestamp, response.expiry_timestamp) == (
        1_000, 11_000, 5_000)
    assert response.hmac == token_hmac(SECRET, response.token_id)
    assert ctx.image.delegation_tokens == {response.token_id: DelegationTokenRecord(
        ALICE, ALICE, (BOB,), 1_000, 11_000, 5_000, response.token_id)}


def test_the_owner_defaults_to_the_requester_who_is_recorded_either_way() -> None:
    ctx = tokens_ctx()
    for_self = create(ctx, ALICE, owner=None)
    empty_owner = create(ctx, ALICE, owner="")
    for_bob = create(ctx, ADMIN, owner=BOB)
    tokens = ctx.image.delegation_tokens
    assert (tokens[for_self.token_id].owner, tokens[for_self.token_id].requester) == (ALICE, ALICE)
    assert tokens[empty_owner.token_id].owner == ALICE
    assert (for_bob.owner, for_bob.requester) == (BOB, ADMIN)
    assert (tokens[for_bob.token_id].owner, tokens[for_bob.token_id].requester) == (BOB, ADMIN)


@pytest.mark.parametrize(("requested_ms", "max_timestamp", "expiry_timestamp"), [
    (-1, 11_000, 5_000),     # not given: the configured max lifetime
    (0, 11_000, 5_000),      # 0 is "not given" too
    (20_000, 11_000, 5_000),  # longer than configured: the configured one
    (6_000, 7_000, 5_000),   # shorter: the requested one
    (2_000, 3_000, 3_000),   # shorter than the expiry time: it expires at its max
])
def test_the_max_lifetime_is_the_smaller_of_the_configured_and_the_requested(
    requested_ms: int, max_timestamp: int, expiry_timestamp: int,
) -> None:
    response = create(tokens_ctx(), max_lifetime_ms=requested_ms)
    assert (response.max_timestamp, response.expiry_timestamp) == (
        max_timestamp, expiry_timestamp)


def test_without_a_secret_key_every_token_request_is_auth_disabled() -> None:
    for settings in (DelegationTokenSettings(), replace(TOKENS, secret_key="")):
        assert not settings.enabled
        ctx = tokens_ctx(settings)
        # Checked first: a non-User renewer is not what is reported.
        response = create(ctx, ADMIN, owner=BOB, renewers=("Group:ops",))
        assert response == CreateDelegationTokenResult(
            ErrorCode.delegation_token_auth_disabled, "Delegation Token feature is not enabled.",
            owner=BOB, requester=ADMIN)
        hmac = token_hmac(SECRET, "any")
        for answer in (renew(ctx, hmac), expire(ctx, hmac)):
            assert answer.error is ErrorCode.delegation_token_auth_disabled
            assert answer.expiry_timestamp == -1
        assert ctx.image.delegation_tokens == {}


@pytest.mark.parametrize("renewer", ["Group:ops", "user:bob", "bob", "User:"])
def test_a_renewer_that_is_not_a_user_principal_is_invalid_principal_type(renewer: str) -> None:
    ctx = tokens_ctx()
    response = create(ctx, renewers=(BOB, renewer))
    assert response.error is ErrorCode.invalid_principal_type
    assert response.message and response.token_id == "" and response.hmac == b""
    assert (response.owner, response.requester) == (ALICE, ALICE)
    assert ctx.image.delegation_tokens == {}


def test_the_owner_may_be_any_principal_type_but_must_be_one() -> None:
    ctx = tokens_ctx()
    assert create(ctx, ADMIN, owner="Group:ops").error is ErrorCode.none
    malformed = create(ctx, ADMIN, owner="bob")
    assert malformed.error is ErrorCode.invalid_request
    assert malformed.message is not None and "principalType:principalName" in malformed.message
    assert len(ctx.image.delegation_tokens) == 1


def test_a_requester_that_is_not_a_principal_is_caller_misuse() -> None:
    ctx = tokens_ctx()
    with pytest.raises(ValueError):
        create_delegation_token(ctx.image, CreateDelegationTokenRequest("alice", None, (), -1),
                                ctx.config, next_offset=0, now_ms=0)


def test_token_ids_are_kafka_uuid_text_derived_from_the_cluster_and_the_offset() -> None:
    config = tokens_ctx().config
    token_id = new_token_id(EMPTY_IMAGE, config, 7)
    assert len(token_id) == 22 and "=" not in token_id and not token_id.startswith("-")
    assert len(base64.urlsafe_b64decode(token_id + "==")) == 16
    assert kafka_uuid.usable(kafka_uuid.from_text(token_id))
    # Pure: the same inputs give the same id; another offset or cluster another one.
    assert new_token_id(EMPTY_IMAGE, config, 7) == token_id
    assert new_token_id(EMPTY_IMAGE, config, 8) != token_id
    assert new_token_id(EMPTY_IMAGE, replace(config, cluster_id="other"), 7) != token_id


def test_a_derived_token_id_never_collides_with_a_token_in_the_image() -> None:
    """Offsets never repeat in one log, so neither do ids; were a live token
    to hold the id an offset derives, the next attempt's id is taken."""
    ctx = tokens_ctx()
    taken = new_token_id(ctx.image, ctx.config, 40)
    ctx.run(ControllerResult((DelegationTokenRecord(ALICE, ALICE, (), 0, 9, 9, taken),), None))
    again = new_token_id(ctx.image, ctx.config, 40)
    assert again != taken and kafka_uuid.usable(kafka_uuid.from_text(again))
    created = create_delegation_token(
        ctx.image, CreateDelegationTokenRequest(BOB, None, (), -1), ctx.config,
        next_offset=40, now_ms=ctx.now_ms)
    assert created.response.token_id == again
    assert created.response.hmac == token_hmac(SECRET, again)


# --- RenewDelegationToken and ExpireDelegationToken ------------------------------------

Command = Callable[..., DelegationTokenExpiryResult]


def test_renew_extends_the_expiry_by_the_renew_period_up_to_the_max() -> None:
    ctx = tokens_ctx()
    token = create(ctx, renewers=(BOB,))  # at 1_000: expiry 5_000, max 11_000
    ctx.now_ms = 3_000
    answer = renew(ctx, token.hmac)  # the configured expiry time: 3_000 + 4_000
    assert answer == DelegationTokenExpiryResult(ErrorCode.none, None, 7_000)
    assert ctx.image.delegation_tokens[token.token_id].expiration_timestamp == 7_000
    assert renew(ctx, token.hmac, period_ms=1_500).expiry_timestamp == 4_500  # shorter: it
    assert renew(ctx, token.hmac, period_ms=60_000).expiry_timestamp == 7_000  # longer: config
    assert renew(ctx, token.hmac, period_ms=0).expiry_timestamp == 7_000
    ctx.now_ms = 6_000
    assert renew(ctx, token.hmac, BOB).expiry_timestamp == 10_000  # a renewer may renew
    ctx.now_ms = 9_000
    assert renew(ctx, token.hmac).expiry_timestamp == 11_000  # capped by the max
    # Only the expiration changed.
    assert ctx.image.delegation_tokens[token.token_id] == DelegationTokenRecord(
        ALICE, ALICE, (BOB,), 1_000, 11_000, 11_000, token.token_id)


def test_expire_with_a_negative_period_removes_the_token_at_once() -> None:
    ctx = tokens_ctx()
    token, other = create(ctx), create(ctx)
    result = expire_delegation_token(
        ctx.image, ExpireDelegationTokenRequest(ALICE, token.hmac, -5), ctx.config,
        now_ms=ctx.now_ms)
    assert result.records == (RemoveDelegationTokenRecord(token.token_id),)
    # The answer echoes the negative period (Kafka's controller does).
    assert result.response == DelegationTokenExpiryResult(ErrorCode.none, None, -5)
    ctx.run(result)
    assert list(ctx.image.delegation_tokens) == [other.token_id]
    assert renew(ctx, token.hmac).error is ErrorCode.delegation_token_not_found


def test_expire_with_a_period_sets_the_expiry_up_to_the_max() -> None:
    ctx = tokens_ctx()
    token = create(ctx)  # at 1_000: expiry 5_000, max 11_000
    ctx.now_ms = 2_000
    assert expire(ctx, token.hmac, period_ms=500) == DelegationTokenExpiryResult(
        ErrorCode.none, None, 2_500)
    assert ctx.image.delegation_tokens[token.token_id].expiration_timestamp == 2_500
    # Unlike a renewal, the period is not capped by the configured expiry time...
    assert expire(ctx, token.hmac, period_ms=6_000).expiry_timestamp == 8_000
    # ... only by the max timestamp.
    assert expire(ctx, token.hmac, period_ms=60_000).expiry_timestamp == 11_000
    # 0: expires now; it stays until swept, and already answers as expired later.
    assert expire(ctx, token.hmac, period_ms=0).expiry_timestamp == 2_000
    assert token.token_id in ctx.image.delegation_tokens
    ctx.now_ms = 2_001
    assert renew(ctx, token.hmac).error is ErrorCode.delegation_token_expired


@pytest.mark.parametrize("command", [renew, expire])
def test_an_unknown_hmac_is_not_found(command: Command) -> None:
    ctx = tokens_ctx()
    token = create(ctx)
    for hmac in (token_hmac("another secret", token.token_id), token.hmac[:-1], b""):
        answer = command(ctx, hmac)
        assert answer == DelegationTokenExpiryResult(
            ErrorCode.delegation_token_not_found, "Delegation Token is not found on server.")
    assert ctx.image.delegation_tokens[token.token_id].expiration_timestamp == 5_000


@pytest.mark.parametrize("command", [renew, expire])
def test_a_token_past_its_expiry_or_max_is_expired_even_for_its_owner(command: Command) -> None:
    ctx = tokens_ctx()
    token = create(ctx)  # expiry 5_000
    ctx.now_ms = 5_000  # at the expiry itself: still valid
    assert command(ctx, token.hmac, period_ms=1_000).error is ErrorCode.none
    ctx.now_ms = 6_001  # past the 6_000 it was given
    answer = command(ctx, token.hmac, CAROL)
    # Expired is checked before ownership.
    assert answer.error is ErrorCode.delegation_token_expired
    assert answer.message == "Delegation Token is expired."
    # Past its max with a later expiration (a controller with another clock):
    # expired too.
    ctx.run(ControllerResult((replace(ctx.image.delegation_tokens[token.token_id],
                                      max_timestamp=6_000, expiration_timestamp=9_000),), None))
    assert command(ctx, token.hmac).error is ErrorCode.delegation_token_expired


@pytest.mark.parametrize("command", [renew, expire])
def test_only_the_owner_and_the_renewers_may_renew_or_expire(command: Command) -> None:
    ctx = tokens_ctx()
    # The admin creates a token for bob, renewable by carol.
    token = create(ctx, ADMIN, owner=BOB, renewers=(CAROL,))
    for stranger in (ALICE, ADMIN, "Group:bob", "User:Bob"):
        answer = command(ctx, token.hmac, stranger, 1_000)
        assert answer == DelegationTokenExpiryResult(
            ErrorCode.delegation_token_owner_mismatch,
            "Specified Principal is not valid Owner/Renewer.")
    assert ctx.image.delegation_tokens[token.token_id].expiration_timestamp == 5_000
    assert command(ctx, token.hmac, CAROL, 1_000).error is ErrorCode.none
    assert command(ctx, token.hmac, BOB, 1_000).error is ErrorCode.none
    assert ctx.image.delegation_tokens[token.token_id].expiration_timestamp == 2_000


def test_the_commands_mutate_nothing() -> None:
    ctx = tokens_ctx()
    token = create(ctx)
    image = ctx.image
    for result in (
        create_delegation_token(image, CreateDelegationTokenRequest(BOB, None, (), -1),
                                ctx.config, next_offset=ctx.next_offset, now_ms=2_000),
        renew_delegation_token(image, RenewDelegationTokenRequest(ALICE, token.hmac, -1),
                               ctx.config, now_ms=2_000),
        expire_delegation_token(image, ExpireDelegationTokenRequest(ALICE, token.hmac, -1),
                                ctx.config, now_ms=2_000),
    ):
        assert len(result.records) == 1
    assert ctx.image is image and list(image.delegation_tokens) == [token.token_id]
    assert image.delegation_tokens[token.token_id].expiration_timestamp == 5_000


# --- the sweep ----------------------------------------------------------------------------


def test_the_sweep_removes_tokens_past_their_expiry_or_their_max() -> None:
    image = apply_records(EMPTY_IMAGE, [
        DelegationTokenRecord(ALICE, ALICE, (), 0, 9_000, 3_000, "expired"),
        DelegationTokenRecord(ALICE, ALICE, (), 0, 3_000, 9_000, "past-max"),
        DelegationTokenRecord(ALICE, ALICE, (), 0, 9_000, 5_000, "at-expiry"),
        DelegationTokenRecord(ALICE, ALICE, (), 0, 5_000, 5_000, "at-max"),
        DelegationTokenRecord(ALICE, ALICE, (), 0, 9_000, 8_000, "live"),
    ])
    assert sweep_expired_delegation_tokens(image, now_ms=5_000) == (
        RemoveDelegationTokenRecord("expired"), RemoveDelegationTokenRecord("past-max"))
    assert sweep_expired_delegation_tokens(image, now_ms=0) == ()
    swept = apply_records(image, sweep_expired_delegation_tokens(image, now_ms=8_001))
    assert list(swept.delegation_tokens) == []


# --- through the QuorumController ------------------------------------------------------


class FakeLog:
    """The propose side of KRaftCore: offsets from ``end``, values kept per call."""

    def __init__(self, end: int = 0) -> None:
        self.end = end
        self.proposed: list[tuple[int, list[bytes]]] = []

    def propose(self, values: Sequence[bytes], now_ms: int) -> int:
        self.proposed.append((self.end, list(values)))
        self.end += len(values)
        return self.end - 1

    def take(self) -> list[object]:
        """The records proposed since the last take (without committing them)."""
        return [decode_record(v) for _base, values in self.proposed for v in values]


def commit_all(log: FakeLog, *controllers: QuorumController) -> None:
    for base, values in log.proposed:
        records = [decode_record(v) for v in values]
        batch = CommittedBatch(base, base + len(values) - 1, 1, False,
                               build_metadata_batch(records, base_offset=base, epoch=1))
        for controller in controllers:
            controller.handle_commit(batch)
    log.proposed.clear()


def start(controller: QuorumController, offset: int = 0) -> None:
    """Epoch 1 begins, led by node 1: its LeaderChange batch commits at ``offset``."""
    controller.handle_leader_change(LeaderAndEpoch(1, 1))
    controller.handle_commit(CommittedBatch(offset, offset, 1, True, build_control_batch(
        ControlRecordType.LEADER_CHANGE, b"\x00", timestamp_ms=0, base_offset=offset,
        partition_leader_epoch=1)))


def active(settings: DelegationTokenSettings = TOKENS) -> tuple[QuorumController, FakeLog]:
    log = FakeLog(end=1)
    controller = QuorumController(1, ControllerConfig(cluster_id="c", delegation_tokens=settings),
                                  log)
    start(controller)
    assert controller.role is ControllerRole.ACTIVE
    return controller, log


def test_token_commands_are_committed_through_the_log_to_every_controller() -> None:
    controller, log = active()
    standby = QuorumController(2, controller.config, FakeLog())
    start(standby)
    assert standby.role is ControllerRole.STANDBY
    created = controller.submit(CreateDelegationTokenRequest(ADMIN, BOB, (CAROL,), -1), 1_000)
    token_id = created.response.token_id
    # The id comes from the offset the record gets, as the command derives it.
    assert created.commit_offset == 1
    assert token_id == new_token_id(EMPTY_IMAGE, controller.config, 1)
    assert not controller.is_committed(created)
    renewed = controller.submit(RenewDelegationTokenRequest(CAROL, created.response.hmac, 500),
                                1_200)  # sees the uncommitted token
    assert renewed.response.expiry_timestamp == 1_700
    commit_all(log, controller, standby)
    assert controller.is_committed(created) and controller.is_committed(renewed)
    assert standby.committed_image.delegation_tokens[token_id] == DelegationTokenRecord(
        BOB, ADMIN, (CAROL,), 1_000, 11_000, 1_700, token_id)
    expired = controller.submit(ExpireDelegationTokenRequest(BOB, created.response.hmac, -1),
                                1_300)
    assert log.take() == [RemoveDelegationTokenRecord(token_id)]
    assert expired.response.expiry_timestamp == -1
    assert controller.submit(RenewDelegationTokenRequest(BOB, created.response.hmac, -1),
                             1_400).response.error is ErrorCode.delegation_token_not_found
    commit_all(log, controller, standby)
    assert standby.committed_image.delegation_tokens == {}
    assert controller.committed_image == standby.committed_image


def test_tick_sweeps_expired_tokens_every_check_interval() -> None:
    controller, log = active()
    controller.submit(CreateDelegationTokenRequest(ALICE, None, (), -1), 0)  # expires at 4_000
    keep = controller.submit(CreateDelegationTokenRequest(BOB, None, (), -1), 0)
    controller.submit(RenewDelegationTokenRequest(BOB, keep.response.hmac, -1), 3_000)  # 7_000
    commit_all(log, controller)
    # The first sweep is one interval after the controller's first tick.
    assert controller.tick(100) == 1_100
    for now_ms, deadline in ((600, 1_100), (1_100, 2_100), (4_000, 5_000), (4_500, 5_000)):
        assert controller.tick(now_ms) == deadline
        assert log.take() == []  # nothing expired yet (4_000 itself is not past)
    assert controller.tick(5_000) == 6_000
    [removal] = log.take()
    assert isinstance(removal, RemoveDelegationTokenRecord)
    assert removal.token_id != keep.response.token_id
    commit_all(log, controller)
    assert list(controller.committed_image.delegation_tokens) == [keep.response.token_id]
    assert controller.tick(6_000) == 7_000 and log.take() == []
    controller.tick(7_000)  # 7_000 is the renewed expiry itself: kept
    assert log.take() == []
    controller.tick(8_000)
    assert log.take() == [RemoveDelegationTokenRecord(keep.response.token_id)]


def test_tick_does_not_sweep_while_tokens_are_disabled() -> None:
    enabled, _ = active()
    # A token left in the log (at offset 0) from when the feature was on.
    image = apply_records(EMPTY_IMAGE, [DelegationTokenRecord(ALICE, ALICE, (), 0, 10, 10, "old")])
    log = FakeLog(end=2)
    controller = QuorumController(1, ControllerConfig(cluster_id="c"), log, image=image)
    start(controller, offset=1)
    assert controller.role is ControllerRole.ACTIVE
    # The deadline is the other timers' (the leader imbalance check), not a sweep's.
    assert controller.tick(0) == 300_000
    assert controller.tick(299_000) == 300_000 and log.take() == []
    assert "old" in controller.committed_image.delegation_tokens
    assert enabled.tick(0) == 1_000


def test_a_newly_active_controller_sweeps_one_interval_after_its_first_tick() -> None:
    """Timers are the active controller's: leadership lost and won back
    starts the sweep schedule afresh (no sweep on a deadline of the old term)."""
    controller, log = active()
    controller.submit(CreateDelegationTokenRequest(ALICE, None, (), -1), 0)  # expires at 4_000
    commit_all(log, controller)
    assert controller.tick(0) == 1_000
    controller.handle_leader_change(LeaderAndEpoch(2, 2))
    assert controller.tick(20_000) == 29_000 and log.take() == []  # a standby sweeps nothing
    controller.handle_leader_change(LeaderAndEpoch(1, 3))
    controller.handle_commit(CommittedBatch(log.end, log.end, 3, True, build_control_batch(
        ControlRecordType.LEADER_CHANGE, b"\x00", timestamp_ms=0, base_offset=log.end,
        partition_leader_epoch=3)))
    log.end += 1
    assert controller.role is ControllerRole.ACTIVE
    assert controller.tick(50_000) == 51_000 and log.take() == []
    controller.tick(51_000)
    [removal] = log.take()
    assert isinstance(removal, RemoveDelegationTokenRecord)
