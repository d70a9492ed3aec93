"""KIP-226's dynamic keystore (data_plane.tls_reload) without a cluster: what
the broker named checks before forwarding, and what it loads as the change
is replayed. Handshakes over loopback show which certificate is served."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from data_plane.config import parse_config
from data_plane.tls_reload import KeystoreReloader, is_sensitive
from metadata_quorum.image import ConfigResource, MetadataImage, frozen_mapping
from metadata_quorum.records import record_fields
from metadata_quorum.records.types import ConfigRecord, ConfigResourceType
from raftlog.security import dev_pki

PREFIX = "listener.name.internal."
BASE = {
    "node.id": "1", "process.roles": "broker,controller", "log.dirs": "/data/a",
    "controller.quorum.voters": "1@127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
    "listeners": "INTERNAL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "listener.security.protocol.map": "INTERNAL:SSL,CONTROLLER:PLAINTEXT",
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dev_pki.Pki:
    return dev_pki.make_pki(tmp_path_factory.mktemp("pki"), servers=("broker", "other"),
                            clients=("alice",))


def _image(dynamic: dict[str, str]) -> MetadataImage:
    resource = ConfigResource(ConfigResourceType.BROKER, "1")
    return dataclasses.replace(MetadataImage(), configs=frozen_mapping(
        {resource: frozen_mapping(dynamic)}))


def _served(context: ssl.SSLContext, pki: dev_pki.Pki) -> bytes:
    """The certificate a handshake with a server on ``context`` presents."""
    async def main() -> bytes:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=str(pki.ca_pem))
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        server.close()
        return bytes(der)
    return asyncio.run(main())


def _der(identity: dev_pki.Identity) -> bytes:
    certificate = x509.load_pem_x509_certificates(identity.cert_pem.read_bytes())[0]
    return certificate.public_bytes(Encoding.DER)


def test_a_renewed_keystore_is_checked_then_loaded_into_the_running_contexts(
    pki: dev_pki.Pki,
) -> None:
    config = parse_config({**BASE, **pki.keystore_settings("broker", "pkcs12"),
                           **pki.truststore_settings()}, {})
    tls = config.security.listener_tls("INTERNAL")
    assert tls is not None and tls.server is not None
    reloader = KeystoreReloader(config.security, 1)
    assert _served(tls.server, pki) == _der(pki.identities["broker"])

    renewed = pki.renew("broker", stem="broker-unit-renewed")
    change = {PREFIX + "ssl.keystore.type": "PEM",
              PREFIX + "ssl.keystore.location": str(renewed.pem)}
    assert reloader.check(_image({}), change) is None
    reloader.apply(_image(change))
    assert _served(tls.server, pki) == _der(renewed)  # the same context object
    # Replaying the same image again loads nothing new; deleting the dynamic
    # settings goes back to server.properties' keystore.
    reloader.apply(_image(change))
    reloader.apply(_image({}))
    assert _served(tls.server, pki) == _der(pki.identities["broker"])


@pytest.mark.parametrize("change,words", [
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "OTHER"}, "subject"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent.pem"},
     PREFIX + "ssl.keystore.location"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "RENEWED_P12",
      "ssl.keystore.password": "not-it"}, PREFIX + "ssl.keystore.password"),
])
def test_a_keystore_that_would_not_do_is_refused_before_forwarding(
    pki: dev_pki.Pki, change: dict[str, str], words: str,
) -> None:
    config = parse_config({**BASE, **pki.keystore_settings("broker"),
                           **pki.truststore_settings()}, {})
    reloader = KeystoreReloader(config.security, 1)
    renewed = pki.renew("broker", stem="broker-unit-refused")
    paths = {"OTHER": str(pki.identities["other"].pem), "RENEWED_P12": str(renewed.p12)}
    problem = reloader.check(_image({}), {PREFIX + k: paths.get(v, v) for k, v in change.items()})
    assert problem is not None and words in problem, problem
    assert "not-it" not in problem


def test_a_keystore_that_fails_on_replay_leaves_the_old_one(pki: dev_pki.Pki) -> None:
    config = parse_config({**BASE, **pki.keystore_settings("broker"),
                           **pki.truststore_settings()}, {})
    tls = config.security.listener_tls("INTERNAL")
    assert tls is not None and tls.server is not None
    reloader = KeystoreReloader(config.security, 1)
    reloader.apply(_image({PREFIX + "ssl.keystore.location": "/nonexistent.pem",
                           PREFIX + "ssl.keystore.type": "PEM"}))
    assert _served(tls.server, pki) == _der(pki.identities["broker"])


def test_secrets_are_sensitive_and_redacted_in_dumps() -> None:
    assert is_sensitive(PREFIX + "ssl.keystore.password")
    assert is_sensitive(PREFIX + "ssl.key.password") and is_sensitive(PREFIX + "ssl.keystore.key")
    assert not is_sensitive(PREFIX + "ssl.keystore.location")
    record = ConfigRecord(ConfigResourceType.BROKER, "1", PREFIX + "ssl.keystore.password", "s3")
    assert record_fields(record)["value"] == "(redacted)"
    plain = ConfigRecord(ConfigResourceType.BROKER, "1", PREFIX + "ssl.keystore.location", "/k")
    assert record_fields(plain)["value"] == "/k"
