"""Kafka's UUID text rules (``Uuid.randomUuid``): never reserved, never ``-``-leading."""

from __future__ import annotations

import itertools
import uuid

import pytest

from metadata_quorum.controller.replication_control import new_topic_id
from metadata_quorum.controller.result import ControllerConfig
from metadata_quorum.image import EMPTY_IMAGE
from raftlog import kafka_uuid


def _leading_dash() -> uuid.UUID:
    """A UUID whose text starts with '-': first byte 0b111110xx (base64url 62)."""
    return uuid.UUID(bytes=b"\xf8" + bytes(15))


def test_text_round_trips_and_matches_kafkas_printing() -> None:
    assert kafka_uuid.to_text(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    for value in (uuid.uuid4() for _ in range(50)):
        assert kafka_uuid.from_text(kafka_uuid.to_text(value)) == value
    assert kafka_uuid.to_text(_leading_dash()).startswith("-")


@pytest.mark.parametrize("bad", ["", "abc", "AAAAAAAAAAAAAAAAAAAAAQ==", "!" * 22, "A" * 23])
def test_from_text_rejects_what_is_not_16_bytes_of_base64url(bad: str) -> None:
    with pytest.raises(ValueError, match="not a base64url UUID"):
        kafka_uuid.from_text(bad)


def test_random_uuid_skips_reserved_ids_and_dash_leading_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = uuid.UUID(int=2**120)
    draws = iter([_leading_dash(), uuid.UUID(int=0), uuid.UUID(int=1), good])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert kafka_uuid.random_uuid() == good


def test_random_uuids_never_read_as_a_command_line_option() -> None:
    # 1 in 64 uniform draws starts with '-'; 2,000 draws miss that with p < 1e-13.
    texts = [kafka_uuid.to_text(kafka_uuid.random_uuid()) for _ in range(2000)]
    assert not [t for t in texts if t.startswith("-")]


def test_derived_topic_ids_follow_the_same_rules() -> None:
    config = ControllerConfig(cluster_id="test-cluster")
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"raftlog:{config.cluster_id}")
    # Find a (name, offset) whose first derivation would print with a leading '-'.
    name, offset = next(
        (f"t{i}", i) for i in itertools.count()
        if not kafka_uuid.usable(uuid.uuid5(namespace, f"{i}/t{i}/0"))
    )
    topic_id = new_topic_id(EMPTY_IMAGE, config, name, offset, set())
    assert topic_id == uuid.uuid5(namespace, f"{offset}/{name}/1")
    assert kafka_uuid.usable(topic_id)
