"""`NodeConfig`: a node's ``server.properties``, with Kafka's names.

`load_config(path, environ)` reads a Java-properties file (``key=value`` or
``key: value``, ``#``/``!`` comments, backslash line continuations), applies
environment overrides, validates everything and returns a frozen
`NodeConfig`. Every problem raises `ConfigError` naming the setting, so a
node fails at start-up, never later.

Environment overrides (for the docker image): ``RAFTLOG_<NAME>`` where
``<NAME>`` is the property name upper-cased with ``.`` replaced by ``_``:
``RAFTLOG_NODE_ID=2`` sets ``node.id``, ``RAFTLOG_CONTROLLER_QUORUM_VOTERS``
sets ``controller.quorum.voters``. An override wins over the file. Only
known property names are mapped (an unknown ``RAFTLOG_*`` variable is
ignored: the environment holds other things, e.g. ``RAFTLOG_HOME``); an
unknown key *in the file* is an error, as a typo there would otherwise be
silently ignored.

Defaults are Kafka's, except where noted on the field.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from data_plane.broker.log_configs import RACK_AWARE_REPLICA_SELECTOR
from data_plane.groups.model import GroupConfigError, group_config
from data_plane.security_config import (
    LISTENER_REAUTH_SETTING,
    LISTENER_SECURITY_SETTING,
    LISTENER_SECURITY_SETTINGS,
    SECURITY_SETTINGS,
    SecurityConfig,
    SecurityConfigError,
    parse_security,
)
from metadata_quorum.controller.configuration_control import BROKER_CONFIG_VALIDATORS
from metadata_quorum.controller.delegation_token_control import DelegationTokenSettings
from raftlog.consensus.config import VoterAddress, parse_voters
from raftlog.net.connection_quotas import parse_ip_overrides
from raftlog.security.sasl import SUPPORTED_MECHANISMS
from raftlog.security.tls import TLS_SETTINGS

__all__ = (
    "ENV_PREFIX",
    "ConfigError",
    "ListenerAddress",
    "NodeConfig",
    "env_name",
    "load_config",
    "parse_config",
    "parse_properties",
)

ENV_PREFIX: Final = "RAFTLOG_"
ROLES: Final = frozenset({"broker", "controller"})


class ConfigError(Exception):
    """An invalid or missing setting; ``setting`` is its property name."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


@dataclass(frozen=True, slots=True)
class ListenerAddress:
    """One entry of ``listeners``: ``NAME://host:port``."""

    name: str
    host: str
    port: int


#: No SASL listener: what a NodeConfig built without parse_config has.
_PLAINTEXT_ONLY: Final = SecurityConfig()


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """A validated node configuration (build it with `parse_config`)."""

    node_id: int
    process_roles: frozenset[str]
    voters: tuple[VoterAddress, ...]
    listeners: tuple[ListenerAddress, ...]
    controller_listener_names: tuple[str, ...]
    advertised_listeners: tuple[ListenerAddress, ...]
    log_dirs: tuple[str, ...]
    metadata_log_dir: str  # metadata.log.dir, else the first of log.dirs
    min_insync_replicas: int = 1
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    quorum_election_timeout_ms: int = 1000
    quorum_election_backoff_max_ms: int = 1000
    quorum_fetch_timeout_ms: int = 2000
    quorum_request_timeout_ms: int = 2000
    quorum_append_linger_ms: int = 25
    quorum_retry_backoff_ms: int = 20
    metadata_max_bytes_between_snapshots: int = 20 * 1024 * 1024
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # KIP-48 delegation tokens: ``delegation.token.secret.key`` (None, the
    # default: tokens disabled) must be the same on every broker and
    # controller, which each derive a token's HMAC from it.
    delegation_token_secret_key: str | None = field(default=None, repr=False)
    delegation_token_max_lifetime_ms: int = 604_800_000
    delegation_token_expiry_time_ms: int = 86_400_000
    delegation_token_expiry_check_interval_ms: int = 3_600_000
    # KIP-599: the window of the controller's mutation-rate token buckets
    # (burst = rate * num * size), `data_plane.controller_mutation_quota`.
    controller_quota_window_num: int = 11
    controller_quota_window_size_seconds: int = 1
    broker_rack: str | None = None  # broker.rack
    # http.listener (raftlog's own; no Kafka equivalent): ``http://host:port``
    # of the node's REST API, /metrics and dashboard (`data_plane.http`).
    # None (the default) serves no HTTP.
    http_listener: ListenerAddress | None = None
    # The broker data-plane settings of `BROKER_SETTINGS` that the file set
    # (Kafka's names, validated integers kept as text): replication, log
    # defaults for topics, coordinators. Unset ones take Kafka's defaults
    # (`data_plane.broker.log_configs.BROKER_CONFIG_DEFAULTS`).
    broker_settings: tuple[tuple[str, str], ...] = ()
    # The `NO_EFFECT_SETTINGS` the file set (warned about at start).
    no_effect_settings: tuple[str, ...] = ()
    # Listener security: protocols, SASL mechanisms and users
    # (`data_plane.security_config`).
    security: SecurityConfig = _PLAINTEXT_ONLY

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def controller_listener(self) -> ListenerAddress:
        """The listener this controller serves the quorum on (the first of
        ``controller.listener.names`` that ``listeners`` declares)."""
        for name in self.controller_listener_names:
            for listener in self.listeners:
                if listener.name == name:
                    return listener
        raise ConfigError("listeners", "no listener is named in controller.listener.names")

    @property
    def broker_listeners(self) -> tuple[ListenerAddress, ...]:
        """What the broker advertises: each non-controller listener, with its
        ``advertised.listeners`` entry of the same name when there is one
        (Kafka: advertised.listeners defaults to listeners)."""
        advertised = {a.name: a for a in self.advertised_listeners}
        return tuple(
            advertised.get(listener.name, listener)
            for listener in self.listeners
            if listener.name not in self.controller_listener_names
        )

    @property
    def inter_broker_listener_name(self) -> str:
        """The listener followers fetch on and brokers call each other on:
        ``inter.broker.listener.name``, else the first broker listener."""
        named = self.security.inter_broker_listener_name
        if named is not None:
            return named
        brokers = self.broker_listeners
        return brokers[0].name if brokers else "PLAINTEXT"

    @property
    def voter_addresses(self) -> dict[int, tuple[str, int]]:
        return {v.node_id: (v.host, v.port) for v in self.voters}


# --- parsing -------------------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text (the subset Kafka configs use). Later keys win."""
    result: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_entry(logical)
        result[key] = value
        logical = ""
    if logical:
        key, value = _split_entry(logical)
        result[key] = value
    return result


def _split_entry(line: str) -> tuple[str, str]:
    cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    if cut < 0:
        key, _, value = line.partition(" ")
        return key.strip(), value.strip()
    return line[:cut].strip(), line[cut + 1 :].strip()


def env_name(setting: str) -> str:
    """``node.id`` -> ``RAFTLOG_NODE_ID``."""
    return ENV_PREFIX + setting.upper().replace(".", "_").replace("-", "_")


def delegation_token_settings(config: NodeConfig) -> DelegationTokenSettings:
    """The ``delegation.token.*`` settings of ``config`` (KIP-48)."""
    return DelegationTokenSettings(
        secret_key=config.delegation_token_secret_key,
        max_lifetime_ms=config.delegation_token_max_lifetime_ms,
        expiry_time_ms=config.delegation_token_expiry_time_ms,
        expiry_check_interval_ms=config.delegation_token_expiry_check_interval_ms,
    )


def load_config(path: str, environ: Mapping[str, str] | None = None) -> NodeConfig:
    """Read ``path``, apply ``RAFTLOG_*`` overrides from ``environ`` (default
    ``os.environ``), validate. Raises `ConfigError` (also for an unreadable file,
    with setting ``config``)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_config(parse_properties(text), os.environ if environ is None else environ)


_Parser = Callable[[str, str], object]


def _int(minimum: int) -> _Parser:
    def parse(setting: str, value: str) -> object:
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(setting, f"{value!r} is not an integer") from None
        if number < minimum:
            raise ConfigError(setting, f"must be >= {minimum}, got {number}")
        return number

    return parse


def _bool(setting: str, value: str) -> object:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ConfigError(setting, f"{value!r} is not true or false")
    return lowered == "true"


# property name -> (NodeConfig field, parser) for the simple settings.
_SIMPLE: Final[Mapping[str, tuple[str, _Parser]]] = {
    "min.insync.replicas": ("min_insync_replicas", _int(1)),
    "broker.session.timeout.ms": ("broker_session_timeout_ms", _int(1)),
    "broker.heartbeat.interval.ms": ("broker_heartbeat_interval_ms", _int(1)),
    "controller.quorum.election.timeout.ms": ("quorum_election_timeout_ms", _int(1)),
    "controller.quorum.election.backoff.max.ms": ("quorum_election_backoff_max_ms", _int(1)),
    "controller.quorum.fetch.timeout.ms": ("quorum_fetch_timeout_ms", _int(1)),
    "controller.quorum.request.timeout.ms": ("quorum_request_timeout_ms", _int(1)),
    "controller.quorum.append.linger.ms": ("quorum_append_linger_ms", _int(0)),
    "controller.quorum.retry.backoff.ms": ("quorum_retry_backoff_ms", _int(0)),
    "metadata.log.max.record.bytes.between.snapshots": (
        "metadata_max_bytes_between_snapshots",
        _int(1),
    ),
    "num.partitions": ("num_partitions", _int(1)),
    "default.replication.factor": ("default_replication_factor", _int(1)),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool),
    "delete.topic.enable": ("delete_topic_enable", _bool),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _bool),
    "leader.imbalance.check.interval.seconds": (
        "leader_imbalance_check_interval_seconds",
        _int(1),
    ),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage", _int(0)),
    "delegation.token.max.lifetime.ms": ("delegation_token_max_lifetime_ms", _int(1)),
    "delegation.token.expiry.time.ms": ("delegation_token_expiry_time_ms", _int(1)),
    "delegation.token.expiry.check.interval.ms": (
        "delegation_token_expiry_check_interval_ms", _int(1)),
    "controller.quota.window.num": ("controller_quota_window_num", _int(1)),
    "controller.quota.window.size.seconds": ("controller_quota_window_size_seconds", _int(1)),
}

# Broker settings passed through to the data plane (replica manager, fetchers,
# log defaults, coordinators): name -> smallest accepted value.
BROKER_SETTINGS: Final[Mapping[str, int]] = {
    "replica.lag.time.max.ms": 1,
    "replica.fetch.max.bytes": 1,
    "replica.fetch.backoff.ms": 0,
    "replica.fetch.wait.max.ms": 0,
    "replica.fetch.min.bytes": 1,
    "max.incremental.fetch.session.cache.slots": 0,
    "min.incremental.fetch.session.eviction.ms": 0,
    "log.retention.check.interval.ms": 1,
    "log.flush.scheduler.interval.ms": 1,
    "log.retention.ms": -1,
    "log.retention.minutes": -1,
    "log.retention.hours": -1,
    "log.retention.bytes": -1,
    "log.segment.bytes": 14,
    "log.roll.ms": 1,
    "log.roll.hours": 1,
    "log.index.interval.bytes": 0,
    "log.index.size.max.bytes": 4,
    "message.max.bytes": 0,
    "max.request.partition.size.limit": 1,  # DescribeTopicPartitions' page
    "log.flush.interval.messages": 1,
    "log.flush.interval.ms": 0,
    "producer.id.expiration.ms": 1,
    "offsets.topic.num.partitions": 1,
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "group.initial.rebalance.delay.ms": 0,
    # Classic groups and committed offsets (`data_plane.groups`).
    "group.min.session.timeout.ms": 1,
    "group.max.session.timeout.ms": 1,
    "group.max.size": 1,
    "offsets.retention.minutes": 1,
    "offsets.retention.check.interval.ms": 1,
    "offset.metadata.max.bytes": 0,
    "offsets.commit.timeout.ms": 1,
    # KIP-848 consumer groups (`data_plane.groups.consumer_commands`).
    "group.consumer.session.timeout.ms": 1,
    "group.consumer.heartbeat.interval.ms": 1,
    "group.consumer.max.size": 1,
    "transaction.state.log.num.partitions": 1,
    "transaction.max.timeout.ms": 1,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1,
    "log.cleaner.backoff.ms": 0,
    "log.cleaner.dedupe.buffer.size": 1,
    "offsets.topic.segment.bytes": 14,
    "transaction.state.log.segment.bytes": 14,
    "log.cleaner.delete.retention.ms": 0,
    "log.cleaner.min.compaction.lag.ms": 0,
    "log.cleaner.max.compaction.lag.ms": 1,
    "log.message.timestamp.before.max.ms": 0,
    "log.message.timestamp.after.max.ms": 0,
    # Client quotas (`data_plane.broker.client_quotas`): the rate window.
    "quota.window.num": 1,
    "quota.window.size.seconds": 1,
    # Replication throttles (`data_plane.broker.replication_quotas`): the rate window.
    "replication.quota.window.num": 1,
    "replication.quota.window.size.seconds": 1,
    # Every listener of the node (`raftlog.net.connection_quotas`).
    "socket.request.max.bytes": 1,
    "socket.send.buffer.bytes": -1,
    "socket.receive.buffer.bytes": -1,
    "connections.max.idle.ms": -1,
    "max.connections.per.ip": 0,
    "max.connections": 0,
    "max.connection.creation.rate": 0,
}


def _ratio(setting: str, value: str) -> object:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(setting, f"{value!r} is not a number") from None
    if not 0.0 <= number <= 1.0:
        raise ConfigError(setting, f"must be in [0, 1], got {number}")
    return number


# Broker settings passed through to the data plane that are not integers:
# name -> parser (the value is passed on as the string it parsed to).
def _ip_overrides(setting: str, value: str) -> object:
    try:
        overrides = parse_ip_overrides(value)
    except ValueError as exc:
        raise ConfigError(setting, str(exc)) from None
    return ",".join(f"{ip}:{count}" for ip, count in overrides.items())


def _assignors(setting: str, value: str) -> object:
    from data_plane.groups.assignors import ASSIGNORS  # the groups package names them

    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise ConfigError(setting, "names no assignor")
    unknown = [n for n in names if n not in ASSIGNORS]
    if unknown:
        raise ConfigError(setting, f"unknown assignor(s) {', '.join(unknown)}; "
                                   f"known: {', '.join(sorted(ASSIGNORS))}")
    return ",".join(names)


def _rebalance_protocols(setting: str, value: str) -> object:
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in ("classic", "consumer")]
    if unknown or "classic" not in names:
        raise ConfigError(setting, "must list classic, and optionally consumer "
                                   f"(got {value!r})")
    return ",".join(names)


def _migration_policy(setting: str, value: str) -> object:
    policy = value.strip().lower()
    if policy not in MIGRATION_POLICIES:
        raise ConfigError(setting, f"must be one of {', '.join(MIGRATION_POLICIES)} "
                                   f"(got {value!r})")
    return policy


#: ``group.consumer.migration.policy`` values (KIP-848 online migration).
MIGRATION_POLICIES: Final = ("bidirectional", "upgrade", "downgrade", "disabled")

def _replica_selector(setting: str, value: str) -> object:
    """KIP-392: unset (leaders only) or Kafka's RackAwareReplicaSelector."""
    name = value.strip()
    if name and name != RACK_AWARE_REPLICA_SELECTOR:
        raise ConfigError(setting, f"only {RACK_AWARE_REPLICA_SELECTOR} is supported "
                                   f"(or unset: consumers read from leaders); got {value!r}")
    return name


def _topic_default(setting: str, value: str) -> object:
    """A broker setting that is the default of a topic config, checked as
    the dynamic broker config of the same name."""
    error = BROKER_CONFIG_VALIDATORS[setting](value.strip())
    if error is not None:
        raise ConfigError(setting, error)
    return value.strip()


BROKER_VALUE_SETTINGS: Final[Mapping[str, _Parser]] = {
    "compression.type": _topic_default,
    "log.cleanup.policy": _topic_default,
    "log.message.timestamp.type": _topic_default,
    "group.consumer.assignors": _assignors,
    "group.consumer.migration.policy": _migration_policy,
    "group.coordinator.rebalance.protocols": _rebalance_protocols,
    "log.cleaner.enable": _bool,
    "log.cleaner.min.cleanable.ratio": _ratio,
    "transaction.partition.verification.enable": _bool,
    "max.connections.per.ip.overrides": _ip_overrides,
    "replica.selector.class": _replica_selector,
}

_STRUCTURED: Final = frozenset(
    {
        "node.id",
        "process.roles",
        "controller.quorum.voters",
        "listeners",
        "controller.listener.names",
        "advertised.listeners",
        "log.dirs",
        "log.dir",
        "metadata.log.dir",
        "broker.rack",
        "delegation.token.secret.key",
        "http.listener",
    }
)

#: Kafka settings that Kafka's sample server.properties carries and that
#: have nothing to tune here (a node is one asyncio event loop, not thread
#: pools and queues): accepted, checked (an integer >= 1) and named in a
#: warning when the node starts, so that such a file loads.
NO_EFFECT_SETTINGS: Final[Mapping[str, str]] = {
    "num.network.threads": "one event loop serves every connection",
    "num.io.threads": "requests are handled on the node's event loop",
    "queued.max.requests": "there is no request queue between network and I/O threads",
    "background.threads": "background work runs on the event loop",
    "num.replica.fetchers": "there is one fetcher per source broker",
    "num.recovery.threads.per.data.dir": "logs are recovered one at a time",
}

#: Kafka settings refused with a reason rather than as unknown.
_REFUSED: Final[Mapping[str, str]] = {
    "zookeeper.connect": "raftlog has no ZooKeeper mode: the metadata lives in the KRaft "
                         "quorum of controller.quorum.voters",
    "controller.quorum.bootstrap.servers": "dynamic quorums (KIP-853) are not supported: "
                                           "name the voters in controller.quorum.voters",
}

KNOWN_SETTINGS: Final = (
    frozenset(_SIMPLE) | _STRUCTURED | frozenset(BROKER_SETTINGS) | frozenset(BROKER_VALUE_SETTINGS)
    | SECURITY_SETTINGS | frozenset(NO_EFFECT_SETTINGS) | {"broker.id"}
)


def parse_config(properties: Mapping[str, str], environ: Mapping[str, str]) -> NodeConfig:
    """Validate ``properties`` overridden by ``RAFTLOG_*`` entries of ``environ``.

    Raises `ConfigError` naming the first bad setting.
    """
    props = dict(properties)
    for key in props:
        if key in _REFUSED:
            raise ConfigError(key, _REFUSED[key])
        if key not in KNOWN_SETTINGS and not _LISTENER_MAX_CONNECTIONS.fullmatch(key) \
                and not LISTENER_SECURITY_SETTING.fullmatch(key) \
                and not LISTENER_REAUTH_SETTING.fullmatch(key):
            raise ConfigError(key, "unknown setting")
    for setting in KNOWN_SETTINGS:
        override = environ.get(env_name(setting))
        if override is not None:
            props[setting] = override.strip()

    node_id = _int(0)("node.id", _required(props, "node.id"))
    assert isinstance(node_id, int)
    if "broker.id" in props and _int(0)("broker.id", props["broker.id"]) != node_id:
        raise ConfigError("broker.id", f"must be node.id ({node_id}) when set, "
                                       f"got {props['broker.id']}")
    no_effect = tuple(sorted(s for s in NO_EFFECT_SETTINGS if s in props))
    for setting in no_effect:
        _int(1)(setting, props[setting])
    roles = _roles(_required(props, "process.roles"))
    listeners = _listeners("listeners", _required(props, "listeners"))
    for listener in listeners:  # the per-listener settings' overrides
        prefix = f"listener.name.{listener.name.lower()}."
        for suffix in _PER_LISTENER_SUFFIXES:
            override = environ.get(env_name(prefix + suffix))
            if override is not None:
                props[prefix + suffix] = override.strip()
    advertised = (
        _listeners("advertised.listeners", props["advertised.listeners"])
        if props.get("advertised.listeners")
        else ()
    )
    controller_names = tuple(
        n.strip() for n in _required(props, "controller.listener.names").split(",") if n.strip()
    )
    if not controller_names:
        raise ConfigError("controller.listener.names", "is empty")
    try:
        voters = parse_voters(_required(props, "controller.quorum.voters"))
    except ValueError as exc:
        raise ConfigError("controller.quorum.voters", str(exc)) from None
    log_dirs = _log_dirs(props)
    metadata_log_dir = props.get("metadata.log.dir") or log_dirs[0]

    simple: dict[str, object] = {}
    for setting, (field_name, parse) in _SIMPLE.items():
        if setting in props:
            simple[field_name] = parse(setting, props[setting])
    config = NodeConfig(
        node_id=node_id,
        process_roles=roles,
        voters=voters,
        listeners=listeners,
        controller_listener_names=controller_names,
        advertised_listeners=advertised,
        log_dirs=log_dirs,
        metadata_log_dir=metadata_log_dir,
        broker_rack=props.get("broker.rack", "").strip() or None,
        # A password-type setting: empty is unset (Kafka's null).
        delegation_token_secret_key=props.get("delegation.token.secret.key") or None,
        http_listener=_http_listener(props.get("http.listener", "").strip()),
        broker_settings=tuple(
            (setting, str(_int(minimum)(setting, props[setting])))
            for setting, minimum in BROKER_SETTINGS.items() if setting in props
        ) + _listener_limits(props, listeners) + tuple(
            (setting, _as_text(parse(setting, props[setting])))
            for setting, parse in BROKER_VALUE_SETTINGS.items() if setting in props
        ),
        no_effect_settings=no_effect,
        **simple,  # type: ignore[arg-type]
    )
    _check_roles(config)
    _check_group_settings(dict(config.broker_settings))
    names = tuple(listener.name for listener in listeners)
    named = props.get("inter.broker.listener.name", "").strip()
    if named and named not in {listener.name for listener in config.broker_listeners}:
        raise ConfigError("inter.broker.listener.name",
                          f"{named!r} is not one of the broker listeners "
                          f"({', '.join(b.name for b in config.broker_listeners)})")
    try:
        security = parse_security(
            props, names, controller_names,
            (named or config.inter_broker_listener_name) if config.is_broker else None)
    except SecurityConfigError as exc:
        raise ConfigError(exc.setting, str(exc).partition(": ")[2]) from None
    return dataclasses.replace(config, security=security)


#: ``listener.name.<listener>.max.connections`` (KIP-402) and
#: ``listener.name.<listener>.max.connection.creation.rate`` (KIP-612), the
#: listener's name in lower case, as Kafka's listener-prefixed settings spell it.
_LISTENER_MAX_CONNECTIONS: Final = re.compile(
    r"listener\.name\.([a-z0-9_-]+)\.(max\.connections|max\.connection\.creation\.rate)")

#: Settings named per listener, as documented (``<listener>`` stands for the name).
LISTENER_SETTINGS: Final = frozenset({
    "listener.name.<listener>.max.connections",
    "listener.name.<listener>.max.connection.creation.rate"}) | LISTENER_SECURITY_SETTINGS

#: What follows ``listener.name.<listener>.`` in the settings a
#: ``RAFTLOG_LISTENER_NAME_<L>_...`` variable overrides.
_PER_LISTENER_SUFFIXES: Final = (
    "max.connections", "max.connection.creation.rate", "sasl.enabled.mechanisms", *(
    f"{mechanism.lower()}.sasl.jaas.config" for mechanism in SUPPORTED_MECHANISMS),
    *sorted(TLS_SETTINGS))


def _listener_limits(props: Mapping[str, str],
                     listeners: tuple[ListenerAddress, ...]) -> tuple[tuple[str, str], ...]:
    """Each ``listener.name.<l>.max.connections`` and
    ``listener.name.<l>.max.connection.creation.rate``, checked: an int >= 0
    for a listener the node has."""
    names = {listener.name.lower() for listener in listeners}
    out = []
    for key in sorted(props):
        match = _LISTENER_MAX_CONNECTIONS.fullmatch(key)
        if match is None:
            continue
        if match.group(1) not in names:
            raise ConfigError(key, f"no listener named {match.group(1)!r} "
                                   f"(listeners: {', '.join(sorted(names))})")
        out.append((key, str(_int(0)(key, props[key]))))
    return tuple(out)


def _as_text(parsed: object) -> str:
    """A parsed value as the broker config keeps it (booleans as Kafka spells them)."""
    if isinstance(parsed, bool):
        return "true" if parsed else "false"
    return str(parsed)


def _check_group_settings(settings: Mapping[str, str]) -> None:
    """The group coordinator's settings must fit together (out of order,
    every JoinGroup would be refused INVALID_SESSION_TIMEOUT, or no KIP-848
    member could heartbeat in time): `GroupConfig`'s checks, each naming
    the setting at fault, refused here."""
    try:
        group_config(settings)
    except GroupConfigError as exc:
        raise ConfigError(exc.setting, exc.detail) from None


def _required(props: Mapping[str, str], setting: str) -> str:
    value = props.get(setting, "").strip()
    if not value:
        raise ConfigError(setting, "is required")
    return value


def _roles(value: str) -> frozenset[str]:
    roles = [r.strip() for r in value.split(",") if r.strip()]
    unknown = [r for r in roles if r not in ROLES]
    if unknown or not roles:
        raise ConfigError(
            "process.roles", f"{value!r}: expected broker, controller, or broker,controller"
        )
    if len(set(roles)) != len(roles):
        raise ConfigError("process.roles", f"{value!r} repeats a role")
    return frozenset(roles)


def _listeners(setting: str, value: str) -> tuple[ListenerAddress, ...]:
    result: list[ListenerAddress] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, address = entry.partition("://")
        host, colon, port_text = address.rpartition(":")
        if not sep or not name or not colon:
            raise ConfigError(setting, f"{entry!r} is not NAME://host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(setting, f"{entry!r}: port {port_text!r} is not an integer") from None
        if not 0 <= port <= 65535:
            raise ConfigError(setting, f"{entry!r}: port out of range")
        if any(existing.name == name for existing in result):
            raise ConfigError(setting, f"listener name {name!r} appears twice")
        result.append(ListenerAddress(name, host, port))
    if not result:
        raise ConfigError(setting, "is empty")
    return tuple(result)


def _http_listener(value: str) -> ListenerAddress | None:
    """``http.listener``: empty for none, else ``http://host:port``."""
    if not value:
        return None
    if not value.lower().startswith("http://") or "," in value:
        raise ConfigError("http.listener", f"{value!r} is not http://host:port")
    (listener,) = _listeners("http.listener", "HTTP://" + value[len("http://"):])
    return listener


def _log_dirs(props: Mapping[str, str]) -> tuple[str, ...]:
    # Kafka: log.dirs wins over log.dir. Unlike Kafka there is no /tmp default:
    # a node must be told where its data lives.
    setting = "log.dir" if props.get("log.dir") and not props.get("log.dirs") else "log.dirs"
    dirs = tuple(d.strip() for d in _required(props, setting).split(",") if d.strip())
    if not dirs:
        raise ConfigError(setting, "is empty")
    if len(set(dirs)) != len(dirs):
        raise ConfigError(setting, "names a directory twice")
    return dirs


def _check_roles(config: NodeConfig) -> None:
    """Kafka's KafkaConfig validation of roles against listeners and voters."""
    names = {listener.name for listener in config.listeners}
    voter_ids = {v.node_id for v in config.voters}
    if config.is_controller:
        if config.node_id not in voter_ids:
            raise ConfigError(
                "controller.quorum.voters",
                f"node.id {config.node_id} has the controller role but is not a voter",
            )
        if not names & set(config.controller_listener_names):
            raise ConfigError(
                "listeners",
                "a controller must declare a listener named in controller.listener.names "
                f"({', '.join(config.controller_listener_names)})",
            )
    elif config.node_id in voter_ids:
        raise ConfigError(
            "process.roles",
            f"node.id {config.node_id} is a voter but has no controller role",
        )
    if config.is_broker and not names - set(config.controller_listener_names):
        raise ConfigError("listeners", "a broker needs a listener that is not a controller one")
    if config.broker_heartbeat_interval_ms >= config.broker_session_timeout_ms:
        raise ConfigError(
            "broker.heartbeat.interval.ms", "must be less than broker.session.timeout.ms"
        )
