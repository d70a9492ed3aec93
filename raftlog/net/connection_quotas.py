"""Connection limits of a node's listeners (Kafka's ``ConnectionQuotas`` and
the Selector's idle expiry).

- ``max.connections.per.ip`` (default 2147483647): a new connection from an
  address that already has that many open, over all the node's listeners,
  is closed at once. ``max.connections.per.ip.overrides``
  (``"host:count,host:count"``, an IP address or a hostname resolved when
  the setting is read) sets the limit of particular addresses; a limit of 0
  refuses the address entirely.
- ``max.connections`` (default 2147483647): the same bound over every
  address. Kafka stops accepting while at it (the connection waits in the
  listen backlog); here the new connection is accepted and closed, as for
  the per-address limit, so a client sees a disconnect either way. As in
  KIP-402 it does not hold back the inter-broker listener when the broker
  has other listeners, nor the controller listeners (a socket server of
  their own in Kafka); their connections still count.
- ``listener.name.<listener>.max.connections`` (KIP-402): the bound of one
  listener's connections.
- ``max.connection.creation.rate`` (KIP-612, default 2147483647): new
  connections per second over the node's listeners, and
  ``listener.name.<listener>.max.connection.creation.rate`` per listener.
  A new connection over either is throttled, as Kafka's acceptor is: it is
  accepted, then nothing it sends is read until the rate allows it, and the
  connections behind it wait their turn. The inter-broker and controller
  listeners are held back only by their own listener's rate. The rates are
  measured by the broker (`data_plane.broker.connection_rate_quotas`), through
  ``creation_throttle``.
- ``connection_creation_rate`` of an ``ip`` client-quota entity (KIP-612):
  a new connection from an address over its rate is closed as it is
  accepted (Kafka delays the close by the throttle time). The rates are the
  broker's (`data_plane.broker.connection_rate_quotas`), checked through
  ``rate_check``.
- ``connections.max.idle.ms`` (default 600000, -1 never): a connection with
  no request in flight and no bytes read or written for that long is
  closed; clients reconnect on their next request, as with Kafka's.

Loopback clusters count their own replication and controller connections
against the per-address limit too, as Kafka does (they come from the same
address as local clients).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = (
    "INT32_MAX",
    "ConnectionLimits",
    "ConnectionQuotas",
    "RateCheck",
    "normal_address",
    "parse_ip_overrides",
)

#: A connection-rate check (KIP-612, `data_plane.broker.connection_rate_quotas`):
#: records a new connection from an address; why it is refused, or None.
RateCheck = Callable[[str], "str | None"]

INT32_MAX: Final = 2**31 - 1


def parse_ip_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``"host:count,..."``, each host
    an IP address (IPv6 may be written bare: the last ``:`` separates the
    count) or a hostname, resolved now to every address it has, as Kafka
    resolves it when the setting is read. Raises ValueError naming the bad
    entry, or a hostname that does not resolve."""
    overrides: dict[str, int] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:count")
        if not count.strip().isdigit():
            raise ValueError(f"the count in {item!r} is not a non-negative integer")
        for address in _addresses(host.strip("[]"), item):
            overrides[address] = int(count)
    return overrides


def _addresses(host: str, item: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(host):
        raise ValueError(f"{host!r} in {item!r} is not an IP address or a hostname")
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise ValueError(f"{host!r} in {item!r} does not resolve: {exc}") from None
    return sorted({normal_address(str(info[4][0])) for info in infos})


_HOSTNAME: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """A node's connection settings (Kafka's names in the module docstring)."""

    max_connections_per_ip: int = INT32_MAX
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connections: int = INT32_MAX
    #: -1: idle connections are never closed.
    idle_ms: int = 600_000
    #: ``listener.name.<listener>.max.connections``: listener name -> limit.
    per_listener: Mapping[str, int] = field(default_factory=dict)
    #: ``max.connection.creation.rate``: new connections per second over the
    #: node's listeners but the exempt ones.
    max_connection_creation_rate: int = INT32_MAX
    #: ``listener.name.<listener>.max.connection.creation.rate``.
    per_listener_creation_rate: Mapping[str, int] = field(default_factory=dict)
    #: Listeners ``max.connections`` does not hold back (KIP-402: the
    #: inter-broker listener; the controller listeners, which Kafka serves
    #: from a socket server of their own). Their connections still count.
    exempt_listeners: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if (self.max_connections_per_ip < 0 or self.max_connections < 0
                or self.max_connection_creation_rate < 0
                or any(v < 0 for v in self.per_listener.values())
                or any(v < 0 for v in self.per_listener_creation_rate.values())):
            raise ValueError("connection limits must not be negative")
        if self.idle_ms < -1:
            raise ValueError("connections.max.idle.ms must be -1 or more")

    @classmethod
    def from_config(cls, config: Mapping[str, str], listeners: Sequence[str] = (),
                    exempt_listeners: frozenset[str] = frozenset()) -> ConnectionLimits:
        """From node settings; an absent key takes Kafka's default.
        ``listeners`` are the node's listener names (for their
        ``listener.name.<name>.max.connections``)."""
        per_listener = {
            name: int(config[key]) for name in listeners
            if (key := f"listener.name.{name.lower()}.max.connections") in config
        }
        per_listener_rate = {
            name: int(config[key]) for name in listeners
            if (key := f"listener.name.{name.lower()}.max.connection.creation.rate") in config
        }
        return cls(
            max_connections_per_ip=int(config.get("max.connections.per.ip", INT32_MAX)),
            per_ip_overrides=parse_ip_overrides(
                config.get("max.connections.per.ip.overrides", "")),
            max_connections=int(config.get("max.connections", INT32_MAX)),
            idle_ms=int(config.get("connections.max.idle.ms", 600_000)),
            per_listener=per_listener,
            max_connection_creation_rate=int(
                config.get("max.connection.creation.rate", INT32_MAX)),
            per_listener_creation_rate=per_listener_rate,
            exempt_listeners=exempt_listeners,
        )

    def limit_for(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_connections_per_ip)


class ConnectionQuotas:
    """Open connections of one node, over all its listeners: admitted ones
    are counted per address until released."""

    def __init__(self, limits: ConnectionLimits, rate_check: RateCheck | None = None) -> None:
        self.limits = limits
        self.open = 0
        self._per_ip: dict[str, int] = {}
        self._per_listener: dict[str, int] = {}
        #: Connections refused since start (a metric).
        self.refused = 0
        #: KIP-612 per-address connection-creation rates; set by the node
        #: once its broker follows the metadata (None: no rate bound).
        self.rate_check = rate_check
        #: KIP-612 node and listener connection-creation rates: how long a
        #: new connection on a listener waits before it is read (None: no
        #: rate bound).
        self.creation_throttle: Callable[[str | None], int] | None = None

    def creation_throttle_ms(self, listener: str | None) -> int:
        """Record an admitted connection on ``listener`` against the
        creation rates; how long it must wait before it is read (0: at once)."""
        throttle = self.creation_throttle
        return 0 if throttle is None else throttle(listener)

    def admit(self, ip: str | None, listener: str | None = None) -> str | None:
        """Count a new connection from ``ip`` on ``listener``, or say why it
        is refused (None: admitted; release it with the same arguments)."""
        limits = self.limits
        if self.open >= limits.max_connections and listener not in limits.exempt_listeners:
            self.refused += 1
            return f"the node already has the maximum of {limits.max_connections} connections"
        listener_limit = None if listener is None else limits.per_listener.get(listener)
        if (listener is not None and listener_limit is not None
                and self._per_listener.get(listener, 0) >= listener_limit):
            self.refused += 1
            return (f"listener {listener} already has the configured maximum of "
                    f"{listener_limit} connections")
        if ip is not None:
            ip = normal_address(ip)
            limit = limits.limit_for(ip)
            if self._per_ip.get(ip, 0) >= limit:
                self.refused += 1
                return f"{ip} already has the configured maximum of {limit} connections"
            if self.rate_check is not None and (why := self.rate_check(ip)) is not None:
                self.refused += 1
                return why
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        if listener is not None:
            self._per_listener[listener] = self._per_listener.get(listener, 0) + 1
        self.open += 1
        return None

    def release(self, ip: str | None, listener: str | None = None) -> None:
        self.open -= 1
        if listener is not None:
            left_here = self._per_listener.get(listener, 0) - 1
            if left_here > 0:
                self._per_listener[listener] = left_here
            else:
                self._per_listener.pop(listener, None)
        if ip is not None:
            ip = normal_address(ip)
            left = self._per_ip.get(ip, 0) - 1
            if left > 0:
                self._per_ip[ip] = left
            else:
                self._per_ip.pop(ip, None)

    def count(self, ip: str) -> int:
        """Open connections from ``ip``."""
        return self._per_ip.get(normal_address(ip), 0)


def normal_address(ip: str) -> str:
    """One spelling per address (IPv4-mapped IPv6 as IPv4)."""
    try:
        address = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)
