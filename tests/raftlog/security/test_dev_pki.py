"""The throwaway PKI (`raftlog.security.dev_pki`) used by tests, chaos runs
and local TLS clusters: server certificates name the hosts asked for, a
client trusting the CA verifies them by IP address, and a renewed
certificate keeps its subject and names."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509

from raftlog.security.dev_pki import make_pki


def _alt_names(path: Path) -> list[str]:
    certificate = x509.load_pem_x509_certificates(path.read_bytes())[0]
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n.value) for n in names]


def test_server_certificates_name_the_given_hosts(tmp_path: Path) -> None:
    pki = make_pki(tmp_path, servers=("broker",), clients=("alice",),
                   hosts=("10.77.0.2", "node-2.chaos", "127.0.0.1"))
    broker = pki.identities["broker"]
    assert _alt_names(broker.cert_pem) == [
        "localhost", "127.0.0.1", "10.77.0.2", "node-2.chaos"]  # no repeats
    renewed = pki.renew("broker")
    assert _alt_names(renewed.cert_pem) == _alt_names(broker.cert_pem)
    assert renewed.dn == broker.dn == "CN=broker,OU=brokers,O=raftlog"
    # A client certificate names no host.
    client = x509.load_pem_x509_certificates(pki.identities["alice"].cert_pem.read_bytes())[0]
    with pytest.raises(x509.ExtensionNotFound):
        client.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_an_ip_address_host_verifies_as_an_ip_san(tmp_path: Path) -> None:
    """What a node dialling a peer at 10.77.0.2 checks (Kafka's
    ``ssl.endpoint.identification.algorithm=https``)."""
    pki = make_pki(tmp_path, servers=("broker",), hosts=("10.77.0.2",))
    client = ssl.create_default_context(cafile=str(pki.ca_pem))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(pki.identities["broker"].pem))
    for host, ok in (("10.77.0.2", True), ("10.77.0.3", False)):
        c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
        c = client.wrap_bio(c_in, c_out, server_hostname=host)
        s = server.wrap_bio(s_in, s_out, server_side=True)
        outcome: Exception | None = None
        for _ in range(10):
            for side, out, peer_in in ((c, c_out, s_in), (s, s_out, c_in)):
                try:
                    side.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError as exc:
                    outcome = outcome or exc  # the first error says why
                peer_in.write(out.read())
        assert (outcome is None) == ok, (host, outcome)
        if ok:
            assert c.version() is not None and s.version() is not None  # handshake done
        else:
            assert "IP address mismatch" in str(outcome)
