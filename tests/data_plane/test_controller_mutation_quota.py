"""KIP-599 controller mutation quotas: the token bucket, its resolution, and
where the controller's commands charge it (data_plane.controller_mutation_quota,
metadata_quorum.controller.replication_control)."""

from __future__ import annotations

import pytest

from data_plane.broker.client_quotas import QuotaWindow
from data_plane.controller_mutation_quota import ControllerMutationQuotas, MutationQuota

APP = (("client-id", "app"),)
ANY_CLIENT = (("client-id", None),)
ALICE = (("user", "alice"),)
ALICE_APP = (("client-id", "app"), ("user", "alice"))


def quotas(entries: dict[tuple[tuple[str, str | None], ...], float]) -> ControllerMutationQuotas:
    q = ControllerMutationQuotas(QuotaWindow(11, 1000))
    q.update({entity: {"controller_mutation_rate": rate} for entity, rate in entries.items()})
    return q


def quota(q: ControllerMutationQuotas, now_ms: int, *, strict: bool = True, client: str = "app",
          user: str = "ANONYMOUS") -> MutationQuota:
    found = q.quota_for(client, now_ms, user=user, strict=strict)
    assert found is not None
    return found


def test_a_strict_bucket_lets_one_request_overdraw_it_then_refuses_until_it_refills() -> None:
    q = quotas({APP: 2.0})  # burst 2 * 11 windows of 1 s = 22 partitions
    first = quota(q, 0)
    assert first.charge(20) and first.charge(5)  # 22 -> 2 -> -3: accepted, overdrawn
    assert first.throttle_time_ms == 0  # as Kafka's: only a refusal reports a wait
    assert not first.charge(1)  # below zero: refused, nothing taken
    assert first.throttle_time_ms == 1500  # -(-3) / 2 per second
    later = quota(q, 1000)  # refilled by 2: still -1
    assert not later.charge(1) and later.throttle_time_ms == 500
    assert quota(q, 1500).charge(1)  # back at 0: not below zero, accepted


def test_a_permissive_bucket_accepts_everything_and_reports_the_wait() -> None:
    q = quotas({APP: 2.0})
    old = quota(q, 0, strict=False)
    assert old.charge(22) and old.throttle_time_ms == 0
    assert old.charge(4) and old.throttle_time_ms == 2000
    # A strict client of the same sensor sees the overdraft.
    assert not quota(q, 0).charge(1)


def test_the_bucket_refills_to_its_burst_and_no_further() -> None:
    q = quotas({APP: 1.0})
    assert quota(q, 0).charge(11)  # the whole burst: at 0
    assert quota(q, 0).charge(1)  # at 0, not below: accepted (-1)
    assert not quota(q, 0).charge(1)
    idle = quota(q, 60_000)  # a minute later: 11 again, not 60
    assert idle.charge(12)  # 11 -> -1
    assert not quota(q, 60_000).charge(1)


def test_resolution_follows_kafkas_precedence_and_sensors() -> None:
    q = quotas({ALICE_APP: 1.0, ALICE: 5.0, ANY_CLIENT: 3.0})
    # users/alice/clients/app: burst 11 (each charge overdraws by one).
    assert quota(q, 0, user="alice").charge(12) and not quota(q, 0, user="alice").charge(1)
    # users/alice: 55, one bucket for every other client id of alice.
    assert quota(q, 0, user="alice", client="other").charge(56)
    assert not quota(q, 0, user="alice", client="third").charge(1)
    # clients/<default>: 33, each client id its own bucket.
    assert quota(q, 0, user="bob", client="x").charge(34)
    assert not quota(q, 0, user="bob", client="x").charge(1)
    assert quota(q, 0, user="bob", client="y").charge(34)
    assert quotas({ALICE: 1.0}).quota_for("app", 0, user="bob", strict=True) is None


def test_a_changed_rate_keeps_the_tokens_spent_and_a_removed_quota_frees_the_client() -> None:
    q = quotas({APP: 1.0})
    assert quota(q, 0).charge(11)
    q.update({APP: {"controller_mutation_rate": 100.0}})
    assert quota(q, 0).charge(1)  # at 0, not below: accepted (-1)
    assert not quota(q, 0).charge(1)
    assert quota(q, 10).charge(1)  # 1 token per 10 ms now
    q.update({})
    assert q.quota_for("app", 20, strict=True) is None and q.buckets == {}


@pytest.mark.parametrize("strict", [True, False])
def test_a_quota_for_an_unbounded_client_is_none(strict: bool) -> None:
    assert quotas({}).quota_for("app", 0, strict=strict) is None
