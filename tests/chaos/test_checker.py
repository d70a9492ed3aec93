"""Each checker on small hand-written histories: catches its anomaly, passes clean ones."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.checker import (
    UNKNOWN,
    AbortedReads,
    CommittedUnread,
    Duplicates,
    InconsistentOffsets,
    LostWrites,
    PollOrder,
    ReplicaDivergence,
    Result,
    Unseen,
    VanishedReads,
    compose,
    kafka_checkers,
    merge_valid,
    read_log_below_hw,
)
from raftlog.records import ControlRecordType
from raftlog.records.batch import pack_header
from raftlog.records.builder import BatchBuilder, build_control_batch
from tests.chaos.hist import H


def kinds(r: Result) -> dict[str, list[int]]:
    """anomaly type -> sorted op indexes of all example ops."""
    return {k: sorted({op.index for a in v for op in a.ops}) for k, v in r.anomalies.items()}


def clean() -> H:
    return (
        H()
        .send(0, 0, 1, 0)
        .send(0, 0, 2, 1)
        .send(1, 1, 3, 0)
        .poll(2, {0: [(0, 1)]})
        .poll(2, {0: [(1, 2)], 1: [(0, 3)]})
        .final(9, {0: [(0, 1), (1, 2)], 1: [(0, 3)]})
    )


def test_clean_history_passes_every_checker() -> None:
    r = compose(kafka_checkers()).check(clean().build())
    assert r.valid is True, json.dumps(r.to_json(), indent=1)
    assert set(r.children) == set(kafka_checkers())
    assert r.anomaly_count() == 0


def test_lost_write_below_highest_read_offset() -> None:
    # send of 2 acked at offset 1; a poll reached offset 2 but nobody saw 2.
    h = (
        H()
        .send(0, 0, 1, 0)
        .send(0, 0, 2, 1)
        .send(0, 0, 3, 2)
        .poll(1, {0: [(0, 1), (2, 3)]})
        .build()
    )
    r = LostWrites().check(h)
    assert r.valid is False
    assert list(r.anomalies) == ["lost-write"]
    (a,) = r.anomalies["lost-write"]
    assert a.details["value"] == 2 and a.details["max_read_offset"] == 2
    assert [op.index for op in a.ops] == [3]  # the ok completion of the lost send


def test_lost_at_end_even_if_read_earlier() -> None:
    h = H().send(0, 0, 1, 0).poll(1, {0: [(0, 1)]}).final(9, {0: []}, ends={0: 0}).build()
    r = LostWrites().check(h)
    assert r.valid is False
    (a,) = r.anomalies["lost-at-end"]
    assert a.details["read_earlier"] is True
    assert [op.index for op in a.ops] == [1, 5]


def test_info_send_is_never_lost_or_unseen() -> None:
    # KAFKA-13574: an indefinite send may or may not have happened.
    h = (
        H()
        .send(0, 0, 1, result="info")
        .send(0, 0, 2, 1)
        .poll(1, {0: [(1, 2)]})
        .final(9, {0: [(1, 2)]})
        .build()
    )
    checks = compose({"lost": LostWrites(), "unseen": Unseen(), "aborted": AbortedReads()})
    assert checks.check(h).valid is True
    # ...and reading it is fine too
    h2 = H().send(0, 0, 1, result="info").poll(1, {0: [(0, 1)]}).final(9, {0: [(0, 1)]}).build()
    assert compose(kafka_checkers()).check(h2).valid is True


def test_unterminated_send_counts_as_info() -> None:
    h = H()._add("invoke", 0, "send", {"partition": 0, "value": 1}).final(9, {0: []}).build()
    assert compose(kafka_checkers()).check(h).valid is True


def test_duplicates_invalid_only_with_idempotence() -> None:
    h = (
        H()
        .send(0, 0, 1, 0)
        .send(0, 0, 1, 1)
        .poll(1, {0: [(0, 1), (1, 1)]})
        .final(9, {0: [(0, 1), (1, 1)]})
        .build()
    )
    r = Duplicates(idempotent=True).check(h)
    assert r.valid is False
    (a,) = r.anomalies["duplicate"]
    assert a.details["positions"] == [[0, 0], [0, 1]]
    loose = Duplicates(idempotent=False).check(h)
    assert loose.valid is True and "duplicate" in loose.anomalies  # reported, allowed
    assert Duplicates().check(clean().build()).valid is True


def test_inconsistent_offsets_across_reads_and_sends() -> None:
    h = H().send(0, 0, 1, 0).send(0, 0, 2, 0).poll(1, {0: [(0, 1)]}).poll(2, {0: [(0, 2)]}).build()
    r = InconsistentOffsets().check(h)
    assert r.valid is False
    (a,) = r.anomalies["inconsistent-offset"]
    assert a.details["offset"] == 0 and sorted(a.details["values"]) == [1, 2]
    assert [op.index for op in a.ops] == [1, 3, 5, 7]


def test_nonmonotonic_poll_and_skip_within_a_consumer() -> None:
    sends = H().send(0, 0, 1, 0).send(0, 0, 2, 1).send(0, 0, 3, 2)
    skip = sends.poll(5, {0: [(0, 1)]}).poll(5, {0: [(2, 3)]}).build()
    r = PollOrder().check(skip)
    assert r.valid is False and list(r.anomalies) == ["poll-skip"]
    assert r.anomalies["poll-skip"][0].details["skipped_offsets"] == [1]
    assert kinds(r) == {"poll-skip": [7, 9]}
    assert PollOrder(allow_skip=True).check(skip).valid is True

    back = (
        H()
        .send(0, 0, 1, 0)
        .send(0, 0, 2, 1)
        .poll(5, {0: [(0, 1), (1, 2)]})
        .poll(5, {0: [(0, 1)]})
        .build()
    )
    r2 = PollOrder().check(back)
    assert r2.valid is False and list(r2.anomalies) == ["nonmonotonic-poll"]


def test_poll_order_under_subscribe_allows_rewinds_and_skips() -> None:
    """A group member given a partition back resumes from the group's
    committed offset, behind what it read itself; both are allowed only
    under subscribe."""
    h = (H().send(0, 0, 1, 0).send(0, 0, 2, 1).send(0, 0, 3, 2)
         .poll(5, {0: [(0, 1), (1, 2)]}).poll(5, {0: [(1, 2)]}).poll(5, {0: [(2, 3)]}).build())
    assert PollOrder().check(h).valid is False
    assert PollOrder(allow_skip=True, allow_rewind=True).check(h).valid is True
    assert "committed-unread" in kafka_checkers(subscribe=True)
    assert "committed-unread" not in kafka_checkers()


def test_committed_unread_and_commit_beyond_end() -> None:
    sends = H().send(0, 0, 1, 0).send(0, 0, 2, 1).send(0, 1, 3, 0)
    # Every record below the committed offsets was polled by some member.
    ok = (sends.poll(5, {0: [(0, 1)]}).poll(6, {0: [(1, 2)], 1: [(0, 3)]})
          .final(9, {0: [(0, 1), (1, 2)], 1: [(0, 3)]}).group_offsets(9, {0: 2, 1: 1}).build())
    r = CommittedUnread().check(ok)
    assert r.valid is True and r.stats["committed"] == {"0": 2, "1": 1}
    # The group committed past offset 1 of partition 0, which nobody polled.
    unread = (H().send(0, 0, 1, 0).send(0, 0, 2, 1).poll(5, {0: [(0, 1)]})
              .final(9, {0: [(0, 1), (1, 2)]}).group_offsets(9, {0: 2}).build())
    r = CommittedUnread().check(unread)
    assert r.valid is False and list(r.anomalies) == ["committed-unread"]
    assert r.anomalies["committed-unread"][0].details["value"] == 2
    # A record read only by the final read does not count as delivered.
    assert CommittedUnread().check(
        H().send(0, 0, 1, 0).final(9, {0: [(0, 1)]}).group_offsets(9, {0: 1}).build()
    ).valid is False
    beyond = (H().send(0, 0, 1, 0).poll(5, {0: [(0, 1)]})
              .final(9, {0: [(0, 1)]}).group_offsets(9, {0: 5}).build())
    r = CommittedUnread().check(beyond)
    assert list(r.anomalies) == ["commit-beyond-end"]
    # No group-offsets read: unknown, not valid.
    assert CommittedUnread().check(H().send(0, 0, 1, 0).build()).valid == UNKNOWN


def test_poll_order_resets_on_assign_and_ignores_other_consumers() -> None:
    h = (
        H()
        .send(0, 0, 1, 0)
        .send(0, 0, 2, 1)
        .poll(5, {0: [(0, 1), (1, 2)]})
        .assign(5, [0])
        .poll(5, {0: [(0, 1)]})  # after assign, starting over is fine
        .poll(6, {0: [(0, 1)]})  # another consumer
        .poll(6, {0: [(1, 2)]})
        .build()
    )
    assert PollOrder().check(h).valid is True


def test_read_above_hw_and_vanished_reads() -> None:
    h = (
        H()
        .send(0, 0, 1, 0)
        .send(0, 0, 2, result="info")
        .poll(1, {0: [(0, 1), (1, 2)]})  # read 2 at offset 1, later truncated
        .final(9, {0: [(0, 1)]}, ends={0: 1})
        .build()
    )
    r = VanishedReads().check(h)
    assert r.valid is False
    (a,) = r.anomalies["read-above-hw"]
    assert a.details == {"partition": 0, "offset": 1, "value": 2, "final_end_offset": 1}
    # replaced below the end offset: vanished (and an inconsistent offset)
    h2 = (
        H()
        .send(0, 0, 1, result="info")
        .poll(1, {0: [(0, 1)]})
        .send(0, 0, 5, 0)
        .final(9, {0: [(0, 5)]})
        .build()
    )
    r2 = VanishedReads().check(h2)
    assert list(r2.anomalies) == ["vanished-read"]
    assert InconsistentOffsets().check(h2).valid is False


def test_vanished_reads_unknown_without_final_read() -> None:
    h = H().send(0, 0, 1, 0).poll(1, {0: [(0, 1)]}).build()
    r = VanishedReads().check(h)
    assert r.valid == UNKNOWN and "final read" in r.reason


def test_aborted_and_phantom_reads() -> None:
    h = (
        H()
        .txn(0, [(0, 1, None), (1, 2, None)], result="fail")  # aborted transaction
        .send(0, 0, 3, 0)
        .poll(1, {0: [(0, 3), (1, 1)], 1: [(0, 99)]})
        .build()
    )
    r = AbortedReads().check(h)
    assert r.valid is False
    assert [a.details["value"] for a in r.anomalies["aborted-read"]] == [1]
    assert kinds(r)["aborted-read"] == [1, 5]
    assert [a.details["value"] for a in r.anomalies["phantom-read"]] == [99]
    ok_txn = (
        H()
        .txn(0, [(0, 1, 0), (1, 2, 0)])
        .poll(1, {0: [(0, 1)], 1: [(0, 2)]})
        .final(9, {0: [(0, 1)], 1: [(0, 2)]})
        .build()
    )
    assert compose(kafka_checkers()).check(ok_txn).valid is True


def test_unseen_invalid_after_final_read_unknown_without() -> None:
    h = (
        H()
        .send(0, 0, 1, 0)
        .send(0, 1, 2, 0)
        .final(9, {0: [(0, 1)], 1: []}, ends={0: 1, 1: 0})
        .build()
    )
    r = Unseen().check(h)
    assert r.valid is False
    assert [a.details["value"] for a in r.anomalies["unseen"]] == [2]
    no_final = H().send(0, 0, 1, 0).build()
    assert Unseen().check(no_final).valid == UNKNOWN


def test_compose_merges_validity_like_jepsen() -> None:
    assert merge_valid([True, UNKNOWN, True]) == UNKNOWN
    assert merge_valid([True, UNKNOWN, False]) is False
    assert merge_valid([]) is True
    h = H().send(0, 0, 1, 0).send(0, 0, 2, 1).poll(1, {0: [(1, 2)]}).build()  # lost 1; no final
    r = compose(kafka_checkers()).check(h)
    assert r.valid is False
    assert r.children["lost-writes"].valid is False
    assert r.children["unseen"].valid == UNKNOWN
    out = r.to_json()
    json.dumps(out)  # serialisable for results.json
    assert out["checkers"]["lost-writes"]["anomaly_counts"] == {"lost-write": 1}


def test_nemesis_ops_are_ignored_by_client_checkers() -> None:
    h = clean().nemesis("start-kill", ["n1"]).nemesis("stop-kill", ["n1"]).build()
    assert compose(kafka_checkers()).check(h).valid is True


# --- replica divergence --------------------------------------------------------


def batch(base: int, *values: bytes) -> bytes:
    b = BatchBuilder(base_offset=base)
    for v in values:
        b.append(value=v, timestamp_ms=1000)
    return b.build()


def test_replica_divergence_detects_differing_bytes() -> None:
    same = batch(0, b"a", b"b")
    assert ReplicaDivergence({0: {1: same, 2: same, 3: same}}).check().valid is True
    other = batch(0, b"a", b"X")
    r = ReplicaDivergence({0: {1: same, 2: same, 3: other}}).check()
    assert r.valid is False
    (a,) = r.anomalies["divergent-replica"]
    assert a.details["nodes"] == [1, 3] and a.details["first_difference"] < len(same)
    assert ReplicaDivergence({0: {1: same}}).check().valid == UNKNOWN


def test_read_log_below_hw_reads_segments_in_order(tmp_path: Path) -> None:
    b0, b1, b2 = batch(0, b"a", b"b"), batch(2, b"c"), batch(3, b"d")
    (tmp_path / "00000000000000000000.log").write_bytes(b0 + b1)
    (tmp_path / "00000000000000000003.log").write_bytes(b2 + b"\x00\x01torn")
    (tmp_path / "00000000000000000000.index").write_bytes(b"ignored")
    assert read_log_below_hw(tmp_path, 100) == b0 + b1 + b2
    assert read_log_below_hw(tmp_path, 3) == b0 + b1
    assert read_log_below_hw(tmp_path, 2) == b0
    assert read_log_below_hw(tmp_path, 1) == b""  # batch 0..1 reaches the HW


def test_txn_runs_check_duplicates_strictly_even_without_the_idempotence_flag() -> None:
    from chaos.runner import RunOptions, client_checkers

    dup = (
        H()
        .txn(0, [(0, 1, 0), (0, 2, 1)])
        .poll(1, {0: [(0, 1), (1, 2), (2, 1)]})  # value 1 twice: a duplicate
        .final(9, {0: [(0, 1), (1, 2), (2, 1)]})
        .build()
    )
    txn = client_checkers(RunOptions(workload="txn", idempotent=False))
    assert "duplicates" in txn and "aborted-reads" in txn
    r = compose(txn).check(dup)
    assert r.valid is False and r.children["duplicates"].valid is False
    plain = client_checkers(RunOptions(workload="send", idempotent=False))
    assert compose(plain).check(dup).children["duplicates"].valid is True  # reported, allowed


# ---- compacted topics (the keyed workload): key = value % KEYS -----------------

KEYS = 4


def test_a_compacted_away_send_superseded_in_the_final_read_is_fine() -> None:
    # Values 1 and 5 share key 1; 5 (offset 1) supersedes 1 (offset 0), which
    # the cleaner removed; a poll had read 1 before that and skips offset 0 later.
    h = (
        H()
        .send(0, 0, 1, 0)
        .send(0, 0, 5, 1)
        .send(0, 0, 2, 2)
        .poll(1, {0: [(0, 1)]})
        .poll(2, {0: [(1, 5), (2, 2)]})
        .final(9, {0: [(1, 5), (2, 2)]}, ends={0: 3})
        .build()
    )
    r = compose(kafka_checkers(compacted_keys=KEYS)).check(h)
    assert r.valid is True, json.dumps(r.to_json(), indent=1)
    assert r.children["lost-writes"].stats["superseded"] == 1
    # The same history on a plain topic: value 1 is lost.
    assert compose(kafka_checkers()).check(h).valid is False


def test_compaction_may_not_remove_a_keys_newest_acknowledged_write() -> None:
    # Value 5 (key 1, offset 1) is gone and only the older value 1 (key 1,
    # offset 0) survived: the key went back in time. Value 6 (key 2) gone
    # with only key 3's value 3 after it: no newer record of key 2.
    h = (
        H()
        .send(0, 0, 1, 0)
        .send(0, 0, 5, 1)
        .send(0, 0, 6, 2)
        .send(0, 0, 3, 3)
        .poll(1, {0: [(1, 5)]})
        .final(9, {0: [(0, 1), (3, 3)]}, ends={0: 4})
        .build()
    )
    r = compose(kafka_checkers(compacted_keys=KEYS)).check(h)
    assert r.valid is False
    lost = r.children["lost-writes"].anomalies["lost-at-end"]
    assert sorted(a.details["value"] for a in lost) == [5, 6]
    # The poll read 5 at offset 1, and no newer record of key 1 survived.
    assert [a.details["value"] for a in r.children["vanished-reads"].anomalies[
        "vanished-read"]] == [5]
    assert kinds(Unseen(keys=KEYS).check(h)) == {"unseen": [5]}  # op 5 completed the send of 6


def test_a_record_stored_under_another_key_is_a_phantom_read() -> None:
    h = H().send(0, 0, 1, 0).final(9, {0: [(0, "key-mismatch:1:b'2'")]}).build()  # type: ignore[list-item]
    r = AbortedReads().check(h)
    assert r.valid is False and "phantom-read" in r.anomalies


def _keyed(base: int, *records: tuple[bytes, bytes | None]) -> bytes:
    b = BatchBuilder(base_offset=base)
    for key, value in records:
        b.append(value, key=key, timestamp_ms=1_000)
    return b.build()


def test_compacted_replicas_are_compared_by_content_not_bytes() -> None:
    whole = _keyed(0, (b"k", b"old")) + _keyed(1, (b"k", b"new"))
    # One replica's cleaner removed the superseded record (an empty batch
    # stands in for it); the other has not cleaned yet.
    empty = pack_header(b"", base_offset=0, partition_leader_epoch=0, attributes=0,
                        last_offset_delta=0, base_timestamp=-1, max_timestamp=-1,
                        producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=0)
    cleaned = empty + _keyed(1, (b"k", b"new"))
    assert ReplicaDivergence({0: {1: whole, 2: cleaned}}).check().valid is False
    assert ReplicaDivergence({0: {1: whole, 2: cleaned}}, compacted=True).check().valid is True
    # The same offset holding another record, or another newest value, is divergence.
    other = _keyed(0, (b"k", b"old")) + _keyed(1, (b"k", b"other"))
    r = ReplicaDivergence({0: {1: whole, 2: other}}, compacted=True).check()
    assert r.valid is False and len(r.anomalies["divergent-replica"]) == 2
    behind = _keyed(0, (b"k", b"old"))
    r = ReplicaDivergence({0: {1: whole, 2: behind}}, compacted=True).check()
    assert [a.details.get("keys") for a in r.anomalies["divergent-replica"]] == [["k"]]


def _txn(base: int, producer_id: int, *records: tuple[bytes, bytes]) -> bytes:
    b = BatchBuilder(base_offset=base, producer_id=producer_id, producer_epoch=0,
                     base_sequence=0, is_transactional=True)
    for key, value in records:
        b.append(value, key=key, timestamp_ms=1_000)
    return b.build()


def _marker(offset: int, producer_id: int, kind: ControlRecordType) -> bytes:
    return build_control_batch(kind, b"\x00\x00\x00\x00\x00\x00", timestamp_ms=1_000,
                               base_offset=offset, producer_id=producer_id, producer_epoch=0)


def test_compacted_replicas_agree_on_what_read_committed_sees() -> None:
    """An aborted transaction's records are gone from a replica whose cleaner
    ran and still there on one whose cleaner has not: not divergence (the
    compact-txn chaos workload, seed 9503, before this rule)."""
    committed = _txn(0, 7, (b"k", b"v1")) + _marker(1, 7, ControlRecordType.COMMIT)
    aborted = _txn(2, 7, (b"k", b"v2"), (b"j", b"w")) + _marker(4, 7, ControlRecordType.ABORT)
    cleaned = pack_header(b"", base_offset=2, partition_leader_epoch=0, attributes=0,
                          last_offset_delta=1, base_timestamp=-1, max_timestamp=-1,
                          producer_id=7, producer_epoch=0, base_sequence=-1, records_count=0)
    uncleaned_log = committed + aborted
    cleaned_log = committed + cleaned + _marker(4, 7, ControlRecordType.ABORT)
    assert ReplicaDivergence({0: {1: uncleaned_log, 2: cleaned_log}},
                             compacted=True).check().valid is True
    # A committed newer value that one replica lacks is still divergence.
    newer = _txn(5, 7, (b"k", b"v3")) + _marker(6, 7, ControlRecordType.COMMIT)
    r = ReplicaDivergence({0: {1: uncleaned_log + newer, 2: cleaned_log}},
                          compacted=True).check()
    assert [a.details.get("keys") for a in r.anomalies["divergent-replica"]] == [["k"]]
    # And so is an aborted value on one replica where the other committed it.
    committed_there = committed + _txn(2, 7, (b"k", b"v2"), (b"j", b"w")) \
        + _marker(4, 7, ControlRecordType.COMMIT)
    r = ReplicaDivergence({0: {1: uncleaned_log, 2: committed_there}}, compacted=True).check()
    assert r.valid is False
