"""Where the controller's commands charge a KIP-599 mutation quota
(`replication_control.PartitionChangeQuota`): once per topic, with the
partitions it creates or deletes, after the topic's own checks, as Kafka's
ReplicationControlManager does. The bucket itself is tested in
tests/data_plane/test_controller_mutation_quota.py."""

from __future__ import annotations

from mq_builders import Ctx

from metadata_quorum.controller import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    create_partitions,
    create_topics,
    delete_topics,
)
from metadata_quorum.controller.result import ControllerConfig
from metadata_quorum.records import RemoveTopicRecord, TopicRecord
from raftlog.net.errors import ErrorCode


class Recorder:
    """A quota that records the charges and refuses from the ``limit``-th on."""

    def __init__(self, limit: int = 10**9) -> None:
        self.charged: list[int] = []
        self.limit = limit

    def charge(self, partitions: int) -> bool:
        if len(self.charged) >= self.limit:
            return False
        self.charged.append(partitions)
        return True


def cluster() -> Ctx:
    ctx = Ctx()
    ctx.add_brokers(1, 2, 3)
    return ctx


def test_create_topics_charges_each_valid_topic_its_partitions_validation_included() -> None:
    ctx = cluster()
    ctx.create("exists", 1, 1)
    recorder = Recorder(limit=2)
    result = create_topics(ctx.image, CreateTopicsRequest((
        CreatableTopic("a", 4, 3),
        CreatableTopic("exists", 9, 1),  # refused for itself: not charged
        CreatableTopic("b", -1, 1),  # the default partition count
        CreatableTopic("c", 2, 1),  # over the limit: throttled
    ), quota=recorder), ControllerConfig(default_num_partitions=3), next_offset=10)
    assert [r.error for r in result.response] == [
        ErrorCode.none, ErrorCode.topic_already_exists, ErrorCode.none,
        ErrorCode.throttling_quota_exceeded]
    assert recorder.charged == [4, 3]
    assert [r.name for r in result.records if isinstance(r, TopicRecord)] == ["a", "b"]
    validating = Recorder()
    checked = create_topics(ctx.image, CreateTopicsRequest(
        (CreatableTopic("d", 5, 1),), validate_only=True, quota=validating),
        ControllerConfig(), next_offset=20)
    assert checked.records == () and validating.charged == [5]  # Kafka charges it too


def test_create_partitions_charges_the_added_count_before_the_assignment_checks() -> None:
    ctx = cluster()
    ctx.create("t", 2, 1)
    ctx.create("u", 1, 1)
    recorder = Recorder()
    result = create_partitions(ctx.image, CreatePartitionsRequest((
        CreatePartitionsTopic("t", 5),
        CreatePartitionsTopic("missing", 3),  # not charged
        CreatePartitionsTopic("u", 1),  # not an increase: not charged
    ), quota=recorder))
    assert [r.error for r in result.response] == [
        ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_partitions]
    # Charged, then refused: Kafka charges before checking the assignment.
    refused = create_partitions(ctx.image, CreatePartitionsRequest((
        CreatePartitionsTopic("u", 3, ((9,), (8,))),), quota=recorder))
    assert refused.response[0].error is ErrorCode.invalid_replica_assignment
    assert recorder.charged == [3, 2]
    throttled = create_partitions(ctx.image, CreatePartitionsRequest((
        CreatePartitionsTopic("t", 4),), quota=Recorder(limit=0)))
    assert [r.error for r in throttled.response] == [ErrorCode.throttling_quota_exceeded]
    assert throttled.records == ()


def test_delete_topics_charges_each_existing_topics_partitions() -> None:
    ctx = cluster()
    a = ctx.create("a", 3, 1)
    ctx.create("b", 2, 1)
    recorder = Recorder(limit=1)
    result = delete_topics(ctx.image, DeleteTopicsRequest(
        names=("a", "missing", "b"), quota=recorder))
    assert [r.error for r in result.response] == [
        ErrorCode.none, ErrorCode.unknown_topic_or_partition,
        ErrorCode.throttling_quota_exceeded]
    assert recorder.charged == [3]
    assert result.records == (RemoveTopicRecord(a),)
    twice = Recorder()
    delete_topics(ctx.image, DeleteTopicsRequest(names=("a",), topic_ids=(a,), quota=twice))
    assert twice.charged == []  # named twice: INVALID_REQUEST, not charged
