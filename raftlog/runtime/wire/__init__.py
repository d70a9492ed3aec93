"""Mapping between the core's KRaft messages and kio (Kafka protocol) entities.

Pure functions, no I/O. The transport (``raftlog.net``) frames and encodes
the kio entities; this package only decides which fields carry what:
`requests` and `responses` map each direction, `common` holds what both use.

Versions (what Kafka 4.0's ``KafkaRaftClient`` sends, and the highest kio has
where that matters):

====================  ===  ==============================================
API                   ver  why
====================  ===  ==============================================
Vote (52)              2   KIP-996 ``PreVote`` exists only from v2
BeginQuorumEpoch (53)  1   KIP-853 shape (flexible, leader endpoints)
EndQuorumEpoch (54)    1   KIP-853 shape (``PreferredCandidates``)
Fetch (1)            17-18 KRaft fetches by topic id from v13 (KIP-516);
                           v15 carries ``ReplicaState`` (KIP-903), v17
                           the replica directory id (Kafka 4.0's raft
                           client sends v17), v18 the fetcher's high
                           watermark (KIP-1166, Kafka 4.1); v18 is sent
                           to a peer that serves it, else v17
FetchSnapshot (59)     1   KIP-853 shape
DescribeQuorum (55)   0-2  served at every version, so the Kafka 3.x and
                           4.x ``kafka-metadata-quorum.sh`` both work
====================  ===  ==============================================

The Raft APIs but Fetch are served at exactly one version each: only
raftlog nodes (and Kafka nodes of the same generation) send them.

Every KRaft RPC addresses the single partition ``__cluster_metadata-0``; from
Fetch v13 on the topic travels as its fixed topic id
``00000000-0000-0000-0000-000000000001`` (Kafka's
``Topic.CLUSTER_METADATA_TOPIC_ID``). A request naming another topic or
partition is answered with INVALID_REQUEST (Kafka answers
UNKNOWN_TOPIC_OR_PARTITION per partition; the effect, a rejected request,
is the same for a raft peer).

Which node a request comes from is part of each request body (the
candidate, the leader, the fetching replica). `decode_request` returns it
as the envelope source, or None when the body does not name one
(DescribeQuorum, an anonymous observer fetch).

Errors: bad peer input raises `WireError` with the Kafka error code to
answer with (STYLE.md section 8, tier 1); the caller answers or drops.
"""

from raftlog.runtime.wire.common import (
    API_KEYS,
    FETCH_KEY,
    FETCH_VERSION,
    METADATA_PARTITION,
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    SUPPORTED_VERSIONS,
    Endpoint,
    WireError,
)
from raftlog.runtime.wire.requests import decode_request, encode_request
from raftlog.runtime.wire.responses import (
    convert_response,
    decode_response,
    encode_response,
    error_response,
)

__all__ = (
    "API_KEYS",
    "FETCH_KEY",
    "FETCH_VERSION",
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "SUPPORTED_VERSIONS",
    "Endpoint",
    "WireError",
    "convert_response",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
)
