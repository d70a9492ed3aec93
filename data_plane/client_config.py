"""The CLI's ``--command-config FILE``: client properties, as Kafka's tools
take them, for a cluster whose listener wants SASL.

The file is Java properties with Kafka's client names::

    security.protocol=SASL_PLAINTEXT
    sasl.mechanism=SCRAM-SHA-256
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="alice-secret";

``sasl.username`` and ``sasl.password`` (librdkafka's names) may stand for
the JAAS config. Kafka's tools hand every other property to the client as
it is; raftlog's CLI drives two clients (librdkafka and its own), so it
takes only the ones it can give both, and names any other as an error
rather than dropping it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from data_plane.config import parse_properties
from raftlog.security.jaas import MODULES, client_credentials, parse_jaas_config
from raftlog.security.sasl import SUPPORTED_MECHANISMS, SaslCredentials

__all__ = ("CLIENT_SETTINGS", "ClientConfigError", "ClientSecurity", "load_command_config")

#: The client properties a command config may hold.
CLIENT_SETTINGS: Final = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password",
})
_PROTOCOLS: Final = ("PLAINTEXT", "SASL_PLAINTEXT")


class ClientConfigError(ValueError):
    """A command config the CLI cannot use; the message says why."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How the CLI's clients reach the cluster."""

    sasl: SaslCredentials | None = None

    def librdkafka(self) -> dict[str, str]:
        """The same, as confluent-kafka (librdkafka) configuration."""
        if self.sasl is None:
            return {}
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": self.sasl.mechanism,
                "sasl.username": self.sasl.username, "sasl.password": self.sasl.password}


PLAINTEXT_CLIENT: Final = ClientSecurity()


def load_command_config(path: str | None) -> ClientSecurity:
    """Read ``path`` (None: PLAINTEXT). Raises ClientConfigError."""
    if path is None:
        return PLAINTEXT_CLIENT
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except OSError as exc:
        raise ClientConfigError(f"--command-config: cannot read {path}: "
                                f"{exc.strerror or exc}") from None
    return client_security(props, where=path)


def client_security(props: dict[str, str], where: str = "--command-config") -> ClientSecurity:
    """The security of client properties ``props``. Raises ClientConfigError."""
    unknown = sorted(set(props) - CLIENT_SETTINGS)
    if unknown:
        raise ClientConfigError(
            f"{where}: {', '.join(unknown)}: not supported here (the CLI takes "
            f"{', '.join(sorted(CLIENT_SETTINGS))})")
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise ClientConfigError(f"{where}: security.protocol={protocol}: raftlog listeners speak "
                                f"{' or '.join(_PROTOCOLS)}")
    if protocol == "PLAINTEXT":
        stray = sorted(k for k in props if k.startswith("sasl."))
        if stray:
            raise ClientConfigError(f"{where}: {', '.join(stray)} set, but security.protocol is "
                                    "PLAINTEXT (set it to SASL_PLAINTEXT)")
        return PLAINTEXT_CLIENT
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ClientConfigError(f"{where}: sasl.mechanism={mechanism} is not supported "
                                f"({', '.join(SUPPORTED_MECHANISMS)})")
    user, password = props.get("sasl.username"), props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    if jaas is not None:
        try:
            entry = parse_jaas_config(jaas)
        except ValueError as exc:
            raise ClientConfigError(f"{where}: sasl.jaas.config: {exc}") from None
        if entry.login_module != MODULES[mechanism]:
            raise ClientConfigError(f"{where}: sasl.jaas.config: {mechanism} takes "
                                    f"{MODULES[mechanism]}, not {entry.login_module}")
        try:
            found = client_credentials(entry)
        except ValueError as exc:  # a username without a password, or the reverse
            raise ClientConfigError(f"{where}: sasl.jaas.config: {exc}") from None
        if found is None:
            raise ClientConfigError(f"{where}: sasl.jaas.config has no username and password")
        user, password = found
    if not user or password is None:
        raise ClientConfigError(
            f"{where}: SASL_PLAINTEXT needs sasl.jaas.config (or sasl.username and "
            f"sasl.password) for {mechanism}")
    return ClientSecurity(SaslCredentials(mechanism, user, password))
