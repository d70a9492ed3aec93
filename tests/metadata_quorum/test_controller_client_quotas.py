"""Client quotas (KIP-546): AlterClientQuotas in the controller, replay into
the image, snapshots, and DescribeClientQuotas' filter semantics."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mq_builders import Ctx

from metadata_quorum.client_quotas import FilterComponent, MatchType, describe_client_quotas
from metadata_quorum.controller import (
    AlterClientQuotasRequest,
    ClientQuotaAlteration,
    ClientQuotaOp,
    alter_client_quotas,
)
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import EMPTY_IMAGE, MetadataProvenance
from metadata_quorum.records import ClientQuotaRecord
from raftlog.net.errors import ErrorCode

APP = (("client-id", "app"),)
ANY_CLIENT = (("client-id", None),)
ALICE = (("user", "alice"),)
ALICE_APP = (("client-id", "app"), ("user", "alice"))


def alter(ctx: Ctx, *entries: tuple[tuple[tuple[str, str | None], ...], dict[str, float | None]],
          validate_only: bool = False) -> list[tuple[ErrorCode, str | None]]:
    request = AlterClientQuotasRequest(tuple(
        ClientQuotaAlteration(entity, tuple(ClientQuotaOp(k, v) for k, v in ops.items()))
        for entity, ops in entries), validate_only)
    result = alter_client_quotas(ctx.image, request)
    ctx.run(result)
    return [(r.error, r.message) for r in result.response]


def test_set_change_and_remove_quotas_replay_into_the_image() -> None:
    ctx = Ctx()
    assert alter(ctx, (APP, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
                 ((("user", "alice"), ("client-id", "app")), {"producer_byte_rate": 10})) == [
        (ErrorCode.none, None), (ErrorCode.none, None)]
    assert dict(ctx.image.client_quotas[APP]) == {"producer_byte_rate": 1024.0,
                                                   "consumer_byte_rate": 2048.0}
    # The entity is stored sorted by type, whatever order the client sent.
    assert dict(ctx.image.client_quotas[ALICE_APP]) == {"producer_byte_rate": 10.0}
    assert alter(ctx, (APP, {"producer_byte_rate": 4096, "consumer_byte_rate": None})) == [
        (ErrorCode.none, None)]
    assert dict(ctx.image.client_quotas[APP]) == {"producer_byte_rate": 4096.0}
    assert alter(ctx, (APP, {"producer_byte_rate": None})) == [(ErrorCode.none, None)]
    assert APP not in ctx.image.client_quotas  # an entity with no quotas left is gone


def test_only_changes_become_records() -> None:
    ctx = Ctx()
    alter(ctx, (APP, {"producer_byte_rate": 1024}))
    same = alter_client_quotas(ctx.image, AlterClientQuotasRequest((ClientQuotaAlteration(
        APP, (ClientQuotaOp("producer_byte_rate", 1024), ClientQuotaOp("consumer_byte_rate", None))),)))
    assert same.records == ()
    assert same.response[0].error is ErrorCode.none


def test_an_entity_named_twice_in_one_request_is_refused_the_second_time() -> None:
    """As Kafka's controller: the first entry for an entity stands and the
    later one is refused, whatever order its components come in."""
    ctx = Ctx()
    assert alter(ctx, (ALICE, {"producer_byte_rate": 1}), (ALICE, {"producer_byte_rate": None}),
                 (APP, {"producer_byte_rate": 5})) == [
        (ErrorCode.none, None), (ErrorCode.invalid_request, "Ignoring duplicate entity user=alice"),
        (ErrorCode.none, None)]
    assert dict(ctx.image.client_quotas[ALICE]) == {"producer_byte_rate": 1.0}
    both = (("user", "alice"), ("client-id", "app"))
    assert [e for e, _ in alter(ctx, (ALICE_APP, {"producer_byte_rate": 2}),
                                (both, {"producer_byte_rate": 3}))] == [
        ErrorCode.none, ErrorCode.invalid_request]
    assert dict(ctx.image.client_quotas[ALICE_APP]) == {"producer_byte_rate": 2.0}


def test_validate_only_writes_nothing() -> None:
    ctx = Ctx()
    assert alter(ctx, (APP, {"producer_byte_rate": 1024}), validate_only=True) == [
        (ErrorCode.none, None)]
    assert ctx.image.client_quotas == {}


def test_bad_entries_are_refused_one_by_one() -> None:
    ctx = Ctx()
    results = alter(
        ctx,
        ((), {"producer_byte_rate": 1}),
        ((("client-id", "a"), ("client-id", "b")), {"producer_byte_rate": 1}),
        ((("ip", "10.0.0.1"), ("user", "u")), {"connection_creation_rate": 5}),
        ((("group", "g"),), {"producer_byte_rate": 1}),
        ((("client-id", ""),), {"producer_byte_rate": 1}),
        # (An entity once per request: a second entry for it is refused as a
        # duplicate, test_an_entity_named_twice_in_one_request_...)
        ((("client-id", "app-1"),), {"request_percentage": 0}),
        ((("client-id", "app-2"),), {"controller_mutation_rate": 0}),
        ((("client-id", "app-3"),), {"no_such_quota": 5}),
        ((("client-id", "app-4"),), {"producer_byte_rate": 1.5}),
        ((("client-id", "app-5"),), {"producer_byte_rate": 0}),
        ((("client-id", "app-6"),), {"producer_byte_rate": float("inf")}),
        (ALICE, {"consumer_byte_rate": 100}),  # the one good entry still applies
    )
    assert [e for e, _ in results] == [ErrorCode.invalid_request] * 11 + [ErrorCode.none]
    messages = [m or "" for _, m in results]
    assert "empty" in messages[0].lower()
    assert "Duplicate" in messages[1]
    assert "cannot be combined" in messages[2]
    assert "group" in messages[3]
    assert "default" in messages[4]
    assert "request_percentage" in messages[5] and "above 0 percent" in messages[5]
    assert "controller_mutation_rate" in messages[6] and "above 0" in messages[6]
    assert "Invalid configuration key" in messages[7]
    assert "Long" in messages[8]
    assert "range" in messages[9]
    assert dict(ctx.image.client_quotas) == {ALICE: {"consumer_byte_rate": 100.0}}


@pytest.mark.parametrize(("key", "good", "also_good"), [
    # KIP-599: partitions per second, enforced by the controller
    # (data_plane.controller_mutation_quota).
    ("controller_mutation_rate", 2.5, 10),
    # KIP-124: percent of a request thread, enforced by brokers
    # (data_plane.broker.request_quotas).
    ("request_percentage", 12.5, 200),
])
def test_rates_above_zero_of_a_user_or_client(key: str, good: float, also_good: int) -> None:
    # Doubles in Kafka; above zero here; not an ip entity's key.
    ctx = Ctx()
    results = alter(
        ctx,
        ((("client-id", "app"),), {key: good}),
        (ALICE, {key: also_good}),
        ((("ip", "10.0.0.1"),), {key: 5}),
        ((("client-id", "app-2"),), {key: -1}),
        ((("client-id", "app-3"),), {key: float("nan")}),
        ((("client-id", "app-4"),), {key: float("inf")}),
    )
    assert [e for e, _ in results] == [ErrorCode.none] * 2 + [ErrorCode.invalid_request] * 4
    assert dict(ctx.image.client_quotas) == {
        (("client-id", "app"),): {key: good},
        ALICE: {key: float(also_good)},
    }


def test_a_key_twice_in_one_entry_is_refused() -> None:
    ctx = Ctx()
    request = AlterClientQuotasRequest((ClientQuotaAlteration(APP, (
        ClientQuotaOp("producer_byte_rate", 1), ClientQuotaOp("producer_byte_rate", None))),))
    result = alter_client_quotas(ctx.image, request)
    assert result.records == ()
    assert result.response[0].error is ErrorCode.invalid_request


def test_quotas_survive_a_snapshot() -> None:
    ctx = Ctx()
    alter(ctx, (APP, {"producer_byte_rate": 1024}), (ANY_CLIENT, {"consumer_byte_rate": 5}),
          (ALICE_APP, {"producer_byte_rate": 7}))
    delta = MetadataDelta(EMPTY_IMAGE)
    for record in ctx.image.to_records():
        delta.replay(record)
    reloaded = delta.apply(ctx.image.provenance)
    assert reloaded == ctx.image
    assert any(isinstance(r, ClientQuotaRecord) for r in ctx.image.to_records())


def test_an_unchanged_quota_map_is_shared_between_images() -> None:
    """Brokers notice quota changes by identity (`is`): a delta that touches
    no quota must hand the same mapping on."""
    ctx = Ctx()
    alter(ctx, (APP, {"producer_byte_rate": 1024}))
    before = ctx.image.client_quotas
    delta = MetadataDelta(ctx.image)
    after = delta.apply(MetadataProvenance(ctx.image.provenance.last_offset + 1, 0))
    assert after.client_quotas is before


def describe(ctx: Ctx, *components: tuple[str, MatchType, str | None],
             strict: bool = False) -> list[tuple[tuple[str, str | None], ...]] | ErrorCode:
    result = describe_client_quotas(
        ctx.image.client_quotas, [FilterComponent(t, int(m), n) for t, m, n in components], strict)
    if result.error is not ErrorCode.none:
        return result.error
    return [entity for entity, _ in result.entries]


def test_describe_filters_like_kafka() -> None:
    ctx = Ctx()
    alter(ctx, (APP, {"producer_byte_rate": 1}), (ANY_CLIENT, {"producer_byte_rate": 2}),
          (ALICE, {"producer_byte_rate": 3}), (ALICE_APP, {"producer_byte_rate": 4}),
          ((("user", None),), {"producer_byte_rate": 5}))
    everything = describe(ctx)
    assert isinstance(everything, list) and len(everything) == 5
    assert describe(ctx, strict=True) == []
    assert describe(ctx, ("client-id", MatchType.EXACT, "app")) == [APP, ALICE_APP]
    assert describe(ctx, ("client-id", MatchType.EXACT, "app"), strict=True) == [APP]
    assert describe(ctx, ("client-id", MatchType.DEFAULT, None)) == [ANY_CLIENT]
    assert describe(ctx, ("user", MatchType.ANY, None), strict=True) == [
        (("user", None),), ALICE]
    assert describe(ctx, ("user", MatchType.EXACT, "alice"),
                    ("client-id", MatchType.ANY, None)) == [ALICE_APP]
    assert describe(ctx, ("user", MatchType.EXACT, "bob")) == []
    # Bad filters.
    assert describe(ctx, ("user", MatchType.ANY, None),
                    ("user", MatchType.ANY, None)) is ErrorCode.invalid_request
    assert describe(ctx, ("user", MatchType.EXACT, None)) is ErrorCode.invalid_request
    assert describe(ctx, ("ip", MatchType.ANY, None),
                    ("user", MatchType.ANY, None)) is ErrorCode.invalid_request
    bad_match = describe_client_quotas(ctx.image.client_quotas,
                                       [FilterComponent("user", 7, None)], False)
    assert bad_match.error is ErrorCode.invalid_request


_types = st.sampled_from(["user", "client-id", "ip", "group", ""])
_names = st.one_of(st.none(), st.text(max_size=5))
_keys = st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage", "x"])
_values = st.one_of(st.none(), st.floats(), st.integers(-5, 2**64).map(float))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(_types, _names), max_size=3),
                          st.lists(st.tuples(_keys, _values), max_size=3)),
                max_size=4))
def test_any_alteration_is_answered_per_entry_and_replays(
    entries: list[tuple[list[tuple[str, str | None]], list[tuple[str, float | None]]]],
) -> None:
    """Whatever a client sends: one answer per entry, no exception; what is
    accepted replays into the image, and an entry's accepted ops show there."""
    ctx = Ctx()
    request = AlterClientQuotasRequest(tuple(
        ClientQuotaAlteration(tuple(entity), tuple(ClientQuotaOp(k, v) for k, v in ops))
        for entity, ops in entries))
    result = alter_client_quotas(ctx.image, request)
    assert len(result.response) == len(entries)
    ctx.run(result)
    accepted = [(dict(entity), ops) for (entity, ops), answer
                in zip(entries, result.response, strict=True) if answer.error is ErrorCode.none]
    for i, (entity, ops) in enumerate(accepted):
        stored = ctx.image.client_quotas.get(tuple(sorted(entity.items())), {})
        for key, value in ops:
            if any(e == entity and k == key for e, o in accepted[i + 1:] for k, _ in o):
                continue  # a later accepted entry sets the same key again
            assert stored.get(key) == value


def test_ip_entities_take_connection_creation_rate_only() -> None:
    """KIP-612: an ip entity (an address or the default) takes only
    connection_creation_rate, an int >= 0; the address is stored normalised."""
    ctx = Ctx()
    results = alter(
        ctx,
        ((("ip", "10.0.0.1"),), {"connection_creation_rate": 5}),
        ((("ip", None),), {"connection_creation_rate": 100}),
        ((("ip", "::FFFF:1"),), {"connection_creation_rate": 0}),
        ((("ip", "not-an-ip"),), {"connection_creation_rate": 5}),
        ((("ip", "10.0.0.2"),), {"producer_byte_rate": 5}),
        ((("ip", "10.0.0.3"),), {"connection_creation_rate": 1.5}),
        ((("ip", "10.0.0.4"),), {"connection_creation_rate": -1}),
        (APP, {"connection_creation_rate": 5}),
    )
    assert [e for e, _ in results] == [ErrorCode.none] * 3 + [ErrorCode.invalid_request] * 5
    messages = [m or "" for _, m in results]
    assert "not a valid IP address" in messages[3]
    assert "ip entity" in messages[4]
    assert "Int" in messages[5]
    assert "range" in messages[6]
    assert "Invalid configuration key" in messages[7]
    assert dict(ctx.image.client_quotas) == {
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
        (("ip", None),): {"connection_creation_rate": 100.0},
        (("ip", "::ffff:1"),): {"connection_creation_rate": 0.0},
    }
