"""Replacing a TLS listener's keystore while the node runs (KIP-226's dynamic
SSL configs): ``raftlog configs alter --broker ID --add-config
listener.name.<listener>.ssl.keystore.location=...``, as
``kafka-configs.sh --entity-type brokers`` does it.

- **The settings**: ``listener.name.<listener>.`` followed by
  ``ssl.keystore.type``, ``ssl.keystore.location``, ``ssl.keystore.password``,
  ``ssl.key.password``, ``ssl.keystore.key`` or
  ``ssl.keystore.certificate.chain``, for one broker only (Kafka refuses
  them as a cluster default: a keystore is one broker's). Each overrides the
  listener's keystore setting of ``server.properties``; deleting it goes
  back to that.
- **Checked where it is asked**: the broker named (the CLI sends the change
  to it) loads the new keystore before forwarding the change; one that
  cannot be read, or whose certificate names another subject or other
  subject alternative names than the one in use, is refused with
  INVALID_CONFIG, as Kafka refuses it (``ssl.allow.dn.changes`` and
  ``ssl.allow.san.changes`` are false). Nothing reaches the metadata log.
- **Applied on replay**: once the change is in the metadata image, the
  broker loads the keystore into its listener's server context and into the
  context it dials its peers with. New connections get the new certificate;
  connections already open keep theirs. Giving the same location again
  reloads the file (a certificate renewed in place). A keystore that fails
  to load then is logged and the old one stays.
- **Secrets**: the passwords and an inline key are sensitive:
  DescribeConfigs answers them with no value, as Kafka does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from metadata_quorum.controller.configuration_control import LISTENER_KEYSTORE_CONFIG
from metadata_quorum.image import ConfigResource
from metadata_quorum.records.types import ConfigResourceType
from raftlog.security.tls import (
    TlsConfigError,
    TlsSettings,
    distinguished_name,
    keystore_certificate,
    reload_keystore,
    server_context,
)

if TYPE_CHECKING:
    from data_plane.security_config import SecurityConfig
    from metadata_quorum.image import MetadataImage

__all__ = ("DYNAMIC_KEYSTORE", "SENSITIVE_SUFFIXES", "KeystoreReloader", "is_sensitive")

log = logging.getLogger(__name__)

#: ``listener.name.<listener>.<keystore setting>`` (the controller's rule).
DYNAMIC_KEYSTORE: Final = LISTENER_KEYSTORE_CONFIG
#: The keystore setting -> the TlsSettings field it sets.
_FIELDS: Final = {"ssl.keystore.type": "keystore_type",
                  "ssl.keystore.location": "keystore_location",
                  "ssl.keystore.password": "keystore_password",
                  "ssl.key.password": "key_password",
                  "ssl.keystore.key": "keystore_key",
                  "ssl.keystore.certificate.chain": "keystore_certificate_chain"}
#: Settings whose values DescribeConfigs does not show.
SENSITIVE_SUFFIXES: Final = ("ssl.keystore.password", "ssl.key.password", "ssl.keystore.key")


def is_sensitive(key: str) -> bool:
    return key.endswith(SENSITIVE_SUFFIXES)


class KeystoreReloader:
    """One broker's TLS listeners and the dynamic keystore settings it last applied."""

    def __init__(self, security: SecurityConfig, broker_id: int) -> None:
        self._security = security
        self._resource = ConfigResource(ConfigResourceType.BROKER, str(broker_id))
        self._applied: dict[str, str] = {}
        # listener -> the settings in use (server.properties until a change).
        self._current = {tls.listener: tls.settings for tls in security.tls
                         if tls.server is not None}

    def dynamic(self, image: MetadataImage) -> dict[str, str]:
        """This broker's dynamic keystore settings in ``image``."""
        return {k: v for k, v in image.config(self._resource).items()
                if DYNAMIC_KEYSTORE.fullmatch(k)}

    def check(self, image: MetadataImage, changes: Mapping[str, str | None]) -> str | None:
        """Why the keystore ``changes`` (key -> new value, None to delete) may
        not be applied to this broker; None if they may."""
        wanted = {**self.dynamic(image), **{k: v for k, v in changes.items() if v is not None}}
        for key, value in changes.items():
            if value is None:
                wanted.pop(key, None)
        for listener in self._listeners_named(changes):
            if listener is None:
                return ("no TLS listener is named in "
                        f"{', '.join(sorted(k for k in changes))}")
            try:
                settings = self._settings(listener, wanted)
                server_context(settings)
                problem = _same_identity(keystore_certificate(self._current[listener]),
                                         keystore_certificate(settings))
            except TlsConfigError as exc:
                return str(exc)
            if problem is not None:
                return f"listener {listener}: {problem}"
        return None

    def apply(self, image: MetadataImage) -> None:
        """Load the keystores whose dynamic settings changed since the last call."""
        dynamic = self.dynamic(image)
        if dynamic == self._applied:
            return
        changed = {k for k in dynamic.keys() | self._applied.keys()
                   if dynamic.get(k) != self._applied.get(k)}
        self._applied = dynamic
        for listener in self._listeners_named(changed):
            if listener is None:
                continue
            tls = self._security.listener_tls(listener)
            assert tls is not None and tls.server is not None
            try:
                settings = self._settings(listener, dynamic)
                reload_keystore(tls.server, settings)
                reload_keystore(tls.client, settings)
            except TlsConfigError as exc:
                log.error("listener %s: the new keystore was not loaded, the old one stays: %s",
                          listener, exc)
                continue
            self._current[listener] = settings
            log.info("listener %s: keystore reloaded (%s)", listener,
                     settings.keystore_location or "inline PEM")

    def _listeners_named(self, keys: Iterable[str]) -> set[str | None]:
        """The TLS listeners ``keys`` name (None for a name that is none)."""
        by_lower = {name.lower(): name for name in self._current}
        out: set[str | None] = set()
        for key in keys:
            match = DYNAMIC_KEYSTORE.fullmatch(key)
            if match is not None:
                out.add(by_lower.get(match.group(1)))
        return out

    def _settings(self, listener: str, dynamic: Mapping[str, str]) -> TlsSettings:
        """The listener's static settings with ``dynamic``'s keystore ones
        over them: a dynamic keystore replaces the static one whole."""
        static = self._security.listener_tls(listener)
        assert static is not None
        prefix = f"listener.name.{listener.lower()}."
        mine = {key[len(prefix):]: value for key, value in dynamic.items()
                if key.startswith(prefix)}
        if not mine:
            return static.settings
        fields = dict.fromkeys(_FIELDS.values())
        fields["keystore_type"] = "JKS"
        sources = dict(static.settings.sources)
        for name, value in mine.items():
            fields[_FIELDS[name]] = value
            sources[_FIELDS[name]] = prefix + name
        if "keystore_type" not in {_FIELDS[n] for n in mine} and (
                "ssl.keystore.key" in mine or "ssl.keystore.certificate.chain" in mine):
            fields["keystore_type"] = "PEM"
        return dataclasses.replace(static.settings, **fields,  # type: ignore[arg-type]
                                   sources=tuple(sources.items()))


def _same_identity(old: x509.Certificate | None, new: x509.Certificate | None) -> str | None:
    """Kafka's check of a new keystore (``ssl.allow.dn.changes`` and
    ``ssl.allow.san.changes`` false): the same subject and subject
    alternative names as the certificate in use."""
    if old is None or new is None:
        return None
    old_dn = distinguished_name(old.public_bytes(Encoding.DER))
    new_dn = distinguished_name(new.public_bytes(Encoding.DER))
    if old_dn != new_dn:
        return (f"the new certificate's subject {new_dn} is not the current one's {old_dn} "
                "(Kafka's ssl.allow.dn.changes is false)")
    if _sans(old) != _sans(new):
        return ("the new certificate's subject alternative names are not the current one's "
                "(Kafka's ssl.allow.san.changes is false)")
    return None


def _sans(certificate: x509.Certificate) -> frozenset[str]:
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return frozenset()
    return frozenset(str(name) for name in extension.value)

