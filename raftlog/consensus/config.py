"""Quorum configuration, with Kafka's names and defaults (`QuorumConfig.java`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class VoterAddress:
    """One entry of ``controller.quorum.voters``: ``id@host:port``."""

    node_id: int
    host: str
    port: int

    def __post_init__(self) -> None:
        if self.node_id < 0:
            raise ValueError(f"voter id must be >= 0, got {self.node_id}")
        if not self.host:
            raise ValueError("voter host must not be empty")
        if not 0 < self.port < 65536:
            raise ValueError(f"voter port out of range: {self.port}")


def parse_voters(spec: str) -> tuple[VoterAddress, ...]:
    """Parse ``controller.quorum.voters`` (``1@host1:9093,2@[::1]:9093``).

    Returns the voters sorted by id. Raises ValueError on a malformed entry or
    a duplicate id.
    """
    voters: dict[int, VoterAddress] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        id_part, sep, address = entry.partition("@")
        if not sep:
            raise ValueError(f"voter {entry!r} is not id@host:port")
        host, sep, port_part = address.rpartition(":")
        if not sep:
            raise ValueError(f"voter {entry!r} has no port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            node_id = int(id_part)
            port = int(port_part)
        except ValueError as exc:
            raise ValueError(f"voter {entry!r}: id and port must be integers") from exc
        if node_id in voters:
            raise ValueError(f"duplicate voter id {node_id} in {spec!r}")
        voters[node_id] = VoterAddress(node_id, host, port)
    if not voters:
        raise ValueError("controller.quorum.voters is empty")
    return tuple(voters[i] for i in sorted(voters))


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """KRaft quorum settings. Field names are Kafka's with dots as underscores.

    ``voters`` is the set of voter ids (``controller.quorum.voters``); the
    addresses are the transport's business.
    """

    voters: frozenset[int]
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    append_linger_ms: int = 25  # controller.quorum.append.linger.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    # Kafka's KafkaRaftClient uses 500 ms for the leader's long poll (fetch.max.wait.ms).
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 8 * 1024 * 1024
    fetch_snapshot_max_bytes: int = 1024 * 1024
    # The accumulator closes a batch once this many bytes of values are queued.
    append_max_batch_bytes: int = 1024 * 1024
    voter_addresses: tuple[VoterAddress, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.voters:
            raise ValueError("a quorum needs at least one voter")
        if any(v < 0 for v in self.voters):
            raise ValueError("voter ids must be >= 0")
        for name in (
            "election_timeout_ms",
            "fetch_timeout_ms",
            "request_timeout_ms",
            "fetch_max_bytes",
            "fetch_snapshot_max_bytes",
            "append_max_batch_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("election_backoff_max_ms", "append_linger_ms", "retry_backoff_ms",
                     "fetch_max_wait_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> QuorumConfig:
        """Build from Kafka-style properties (``controller.quorum.*`` keys)."""
        addresses = parse_voters(props["controller.quorum.voters"])
        prefix = "controller.quorum."
        kwargs: dict[str, int] = {}
        for key in ("election.timeout.ms", "election.backoff.max.ms", "fetch.timeout.ms",
                    "request.timeout.ms", "append.linger.ms", "retry.backoff.ms"):
            if prefix + key in props:
                kwargs[key.replace(".", "_")] = int(props[prefix + key])
        return cls(
            voters=frozenset(a.node_id for a in addresses),
            voter_addresses=addresses,
            **kwargs,
        )

    @property
    def majority(self) -> int:
        """Votes (or replicas) needed for a quorum."""
        return len(self.voters) // 2 + 1

    def sorted_voters(self) -> tuple[int, ...]:
        """Voter ids in ascending order (deterministic iteration)."""
        return tuple(sorted(self.voters))
