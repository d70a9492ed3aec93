"""`data_plane.broker.client_quotas`: Kafka's Rate, the throttle time, quota
precedence and sensor sharing, on an injected clock (every time is a
``now_ms`` argument)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from data_plane.broker.client_quotas import (
    ANONYMOUS,
    CONSUMER_BYTE_RATE,
    INACTIVE_SENSOR_EXPIRATION_MS,
    PRODUCER_BYTE_RATE,
    ClientQuotaManager,
    ClientQuotas,
    QuotaWindow,
    SampledStat,
)
from metadata_quorum.records import QuotaEntity

U = ANONYMOUS
Quotas = Mapping[QuotaEntity, Mapping[str, float]]


def manager(quotas: Quotas, window: QuotaWindow | None = None,
            key: str = PRODUCER_BYTE_RATE) -> ClientQuotaManager:
    m = ClientQuotaManager(key, window or QuotaWindow())
    m.update(quotas)
    return m


# ---- SampledStat / Rate --------------------------------------------------------


def test_rate_window_is_never_shorter_than_num_minus_one_full_windows() -> None:
    """Kafka's Rate.windowSize: a first record is measured over 10 windows
    (11 samples of 1 s), plus the part of the current one that passed."""
    stat = SampledStat(QuotaWindow(11, 1000))
    stat.record(1000, 0)
    assert stat.window_ms(0) == 10_000
    assert stat.rate(0) == pytest.approx(100.0)
    assert stat.window_ms(500) == 10_500
    assert stat.window_ms(2_500) == 10_500  # 2 full windows + 8 lacking + 500
    assert stat.rate(2_500) == pytest.approx(1000 / 10.5)


def test_rate_window_is_the_elapsed_time_once_it_spans_enough_windows() -> None:
    stat = SampledStat(QuotaWindow(11, 1000))
    for second in range(11):  # one sample per second, 0..10
        stat.record(1000, second * 1000)
    assert stat.total(10_000) == 11_000
    assert stat.window_ms(10_000) == 10_000
    assert stat.window_ms(10_400) == 10_400
    assert stat.rate(10_400) == pytest.approx(11_000 / 10.4)


def test_a_record_after_the_window_starts_a_new_sample_and_reuses_the_oldest_slot() -> None:
    stat = SampledStat(QuotaWindow(3, 1000))
    stat.record(10, 0)
    stat.record(5, 999)  # same sample: its window has not passed
    assert stat.count(999) == 2
    stat.record(20, 1000)  # a new sample starting at 1000
    stat.record(40, 2500)  # a third, starting at 2500
    assert stat.total(2500) == 75
    # The ring is full: the next sample takes the oldest slot (started at 0).
    stat.record(80, 3500)
    assert stat.total(3500) == 20 + 40 + 80
    assert stat.window_ms(3500) == 2500  # since the oldest live sample (1000)


def test_samples_older_than_num_windows_count_for_nothing() -> None:
    stat = SampledStat(QuotaWindow(11, 1000))
    stat.record(1000, 0)
    assert stat.total(10_999) == 1000
    assert stat.rate(10_999) == pytest.approx(1000 / 10.999)
    assert stat.total(11_000) == 0  # num * size after its start
    assert stat.rate(11_000) == 0
    # Expired samples do not stretch the window either.
    stat.record(500, 11_000)
    assert stat.window_ms(11_000) == 10_000


def test_window_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        QuotaWindow(0, 1000)
    with pytest.raises(ValueError):
        QuotaWindow(11, 0)
    assert QuotaWindow.from_config({}) == QuotaWindow(11, 1000)
    assert QuotaWindow.from_config(
        {"quota.window.num": "3", "quota.window.size.seconds": "2"}) == QuotaWindow(3, 2000)


# ---- throttle time ---------------------------------------------------------------


def test_throttle_time_is_the_delay_that_brings_the_rate_back_to_the_bound() -> None:
    """ClientQuotaManager.throttleTime: (rate - bound) / bound * window."""
    m = manager({(("client-id", "app"),): {PRODUCER_BYTE_RATE: 100.0}})
    # 1000 bytes over the 10 s minimum window: 100 B/s, at the bound, allowed.
    assert m.record_and_get_throttle_ms("app", 1000, 0) == 0
    # 2000 bytes: 200 B/s, twice the bound: one more window's worth, 10 s.
    assert m.record_and_get_throttle_ms("app", 1000, 0) == 10_000
    # Half a second later the window is 10.5 s: 2000 B / 10.5 s is still
    # over the bound, by less (Kafka measures the throttle over the window
    # the rate used).
    assert m.throttle_ms("app", 500) == 9500


def test_throttle_time_rounds_half_up_like_java() -> None:
    # A 1 ms window (2 samples of 1 ms): 3 bytes is 3000 B/s against 2000:
    # (3000 - 2000) / 2000 * 1 ms = 0.5 ms, which Math.round makes 1.
    m = manager({(("client-id", "c"),): {PRODUCER_BYTE_RATE: 2000.0}}, QuotaWindow(2, 1))
    assert m.record_and_get_throttle_ms("c", 3, 0) == 1


def test_throttle_ms_without_recording_and_the_throttle_time_metric() -> None:
    m = manager({(("client-id", "app"),): {CONSUMER_BYTE_RATE: 100.0}},
                key=CONSUMER_BYTE_RATE)
    assert m.throttle_ms("app", 0) == 0  # no sensor yet: nothing measured
    assert m.sensors == {}
    assert m.record_and_get_throttle_ms("app", 3000, 0) == 20_000
    assert m.throttle_ms("app", 0) == 20_000
    sensor = m.sensors[("", "app")]
    assert sensor.bytes.total(0) == 3000  # the check recorded no bytes
    assert sensor.throttles == 2
    ((key, rate, avg_ms),) = list(m.snapshot(0))
    assert key == ("", "app") and rate == pytest.approx(300.0) and avg_ms == 20_000


def test_record_unless_over_takes_back_what_would_go_over_except_in_an_empty_window() -> None:
    """Kafka's fetch accounting: an answer that would take the client over
    its bound is not sent and its bytes are taken back; but the first answer
    of an empty window goes, so a consumer always moves."""
    m = manager({(("client-id", "app"),): {CONSUMER_BYTE_RATE: 100.0}},
                key=CONSUMER_BYTE_RATE)
    # The window allows 1 000 bytes; 600 go.
    assert m.record_unless_over("app", 600, 0) == (0, True)
    # 600 more would make 1 200: refused, throttled, and not counted.
    throttle, serve = m.record_unless_over("app", 600, 0)
    assert not serve and throttle == round((1200 / 10 - 100) / 100 * 10_000)
    assert m.sensors[("", "app")].bytes.total(0) == 600
    # Nothing recorded in the window: even 5 000 bytes go, throttled.
    assert m.record_unless_over("fresh", 5000, 0) == (0, True)  # no quota on "fresh"
    m2 = manager({(("client-id", None),): {CONSUMER_BYTE_RATE: 100.0}}, key=CONSUMER_BYTE_RATE)
    throttle, serve = m2.record_unless_over("fresh", 5000, 0)
    assert serve and throttle == 40_000
    assert m2.sensors[("", "fresh")].bytes.total(0) == 5000


def test_max_value_in_quota_window() -> None:
    """getMaxValueInQuotaWindow: bound * (num - 1) * window seconds."""
    m = manager({(("client-id", None),): {CONSUMER_BYTE_RATE: 1024.0}},
                QuotaWindow(11, 2000), key=CONSUMER_BYTE_RATE)
    assert m.max_value_in_window("anyone") == 1024.0 * 10 * 2
    assert manager({(("client-id", "x"),): {CONSUMER_BYTE_RATE: 1.0}},
                   key=CONSUMER_BYTE_RATE).max_value_in_window("y") is None


# ---- resolution and sensor sharing ------------------------------------------------

# One entity per precedence level (Kafka's DefaultQuotaCallback), with a bound
# naming its level.
LEVELS: list[tuple[QuotaEntity, float, tuple[str, str]]] = [
    ((("client-id", "c"), ("user", U)), 1.0, (U, "c")),
    ((("client-id", None), ("user", U)), 2.0, (U, "c")),
    ((("user", U),), 3.0, (U, "")),
    ((("client-id", "c"), ("user", None)), 4.0, (U, "c")),
    ((("client-id", None), ("user", None)), 5.0, (U, "c")),
    ((("user", None),), 6.0, (U, "")),
    ((("client-id", "c"),), 7.0, ("", "c")),
    ((("client-id", None),), 8.0, ("", "c")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_entity_that_sets_the_key_wins(level: int) -> None:
    """Levels 1..8: with every level from ``level`` down set, ``level`` gives
    the bound and the sensor key."""
    quotas = {entity: {PRODUCER_BYTE_RATE: bound} for entity, bound, _ in LEVELS[level:]}
    _, bound, sensor_key = LEVELS[level]
    assert manager(quotas).resolve("c") == (sensor_key, bound)


def test_an_entity_without_the_key_is_skipped() -> None:
    quotas: Quotas = {
        (("client-id", "c"),): {CONSUMER_BYTE_RATE: 1.0},  # the other key
        (("client-id", None),): {PRODUCER_BYTE_RATE: 8.0},
    }
    assert manager(quotas).resolve("c") == (("", "c"), 8.0)
    assert manager(quotas, key=CONSUMER_BYTE_RATE).resolve("c") == (("", "c"), 1.0)
    assert manager(quotas, key=CONSUMER_BYTE_RATE).resolve("d") is None


def test_other_users_and_ip_entities_do_not_apply() -> None:
    quotas: Quotas = {
        (("user", "alice"),): {PRODUCER_BYTE_RATE: 1.0},
        (("client-id", "c"), ("user", "alice")): {PRODUCER_BYTE_RATE: 1.0},
        (("ip", None),): {PRODUCER_BYTE_RATE: 1.0},
    }
    m = manager(quotas)
    assert m.enabled  # alice's quotas count, though not for ANONYMOUS
    assert m.resolve("c") is None
    assert m.resolve("c", user="alice") == (("alice", "c"), 1.0)
    assert not manager({(("ip", None),): {PRODUCER_BYTE_RATE: 1.0}}).enabled


def test_a_user_quota_is_shared_by_all_of_its_client_ids() -> None:
    m = manager({(("user", U),): {PRODUCER_BYTE_RATE: 100.0}})
    assert m.record_and_get_throttle_ms("one", 600, 0) == 0
    # The same sensor: 1200 bytes over 10 s is 120 B/s, over the bound.
    assert m.record_and_get_throttle_ms("two", 600, 0) == 2000
    assert list(m.sensors) == [(U, "")]


def test_the_client_id_default_gives_each_client_id_its_own_rate() -> None:
    m = manager({(("client-id", None),): {PRODUCER_BYTE_RATE: 100.0}})
    assert m.record_and_get_throttle_ms("one", 1000, 0) == 0
    assert m.record_and_get_throttle_ms("two", 1000, 0) == 0
    assert m.record_and_get_throttle_ms("one", 1000, 0) == 10_000
    assert set(m.sensors) == {("", "one"), ("", "two")}
    # A client without a client id is "": one more client id.
    assert m.record_and_get_throttle_ms("", 10, 0) == 0
    assert ("", "") in m.sensors


def test_a_user_client_default_keeps_a_sensor_per_client_id() -> None:
    m = manager({(("client-id", None), ("user", None)): {PRODUCER_BYTE_RATE: 100.0}})
    m.record_and_get_throttle_ms("one", 1000, 0)
    m.record_and_get_throttle_ms("two", 1000, 0)
    assert set(m.sensors) == {(U, "one"), (U, "two")}


# ---- enabled / disabled and changes ------------------------------------------------


def test_without_quotas_nothing_is_enabled_or_measured() -> None:
    quotas = ClientQuotas()
    quotas.update({})
    assert not quotas.produce.enabled and not quotas.fetch.enabled
    assert quotas.produce.record_and_get_throttle_ms("app", 10**9, 0) == 0
    assert quotas.produce.sensors == {}
    # Only the other key set: the produce side stays off.
    quotas.update({(("client-id", "app"),): {CONSUMER_BYTE_RATE: 5.0}})
    assert quotas.fetch.enabled and not quotas.produce.enabled


def test_an_unlimited_client_records_nothing() -> None:
    m = manager({(("client-id", "limited"),): {PRODUCER_BYTE_RATE: 1.0}})
    assert m.enabled
    assert m.record_and_get_throttle_ms("free", 10**9, 0) == 0
    assert m.sensors == {}


def test_update_recognises_the_shared_mapping_and_keeps_sensors_across_changes() -> None:
    first: Quotas = {(("client-id", "app"),): {PRODUCER_BYTE_RATE: 100.0}}
    m = manager(first)
    assert not m.update(first)  # the same object: nothing to re-read
    assert m.record_and_get_throttle_ms("app", 1500, 0) == 5000
    # A higher bound applies to the rate measured so far.
    assert m.update({(("client-id", "app"),): {PRODUCER_BYTE_RATE: 300.0}})
    assert m.throttle_ms("app", 0) == 0
    assert m.sensors[("", "app")].bytes.total(0) == 1500
    # Removing the last quota turns the manager off.
    assert m.update({})
    assert not m.enabled and m.resolve("app") is None


def test_sensors_idle_for_an_hour_are_dropped() -> None:
    m = manager({(("client-id", None),): {PRODUCER_BYTE_RATE: 100.0}})
    m.record_and_get_throttle_ms("old", 1, 0)
    m.record_and_get_throttle_ms("recent", 1, INACTIVE_SENSOR_EXPIRATION_MS - 60_000)
    # The next record after the hour sweeps (checks run every 30 s).
    m.record_and_get_throttle_ms("new", 1, INACTIVE_SENSOR_EXPIRATION_MS)
    assert set(m.sensors) == {("", "recent"), ("", "new")}
    assert m.expire_idle_sensors(2 * INACTIVE_SENSOR_EXPIRATION_MS) == 2
    assert m.sensors == {}
