"""Driving a SASL exchange as a connection's shell does, for the mechanism tests."""

from __future__ import annotations

from raftlog.security.sasl import SaslClient, SaslServer


def run(client: SaslClient, server: SaslServer) -> list[bytes]:
    """The whole exchange, as a shell runs it; returns every token in order."""
    transcript = []
    token = client.initial()
    while not client.complete:
        transcript.append(token)
        reply = server.evaluate(token)
        transcript.append(reply)
        token = client.evaluate(reply)
    return transcript
