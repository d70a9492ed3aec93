"""The KRaft runtime: the asyncio shell around the sans-I/O core.

Modules by role: ``wire`` (core messages <-> kio entities), ``transport``
(Kafka-protocol client and server handlers for the Raft APIs), ``driver``
(`RaftDriver`: one task owns the core; persist, send, apply, advance),
``quorum_state_store`` (the ``quorum-state`` file), ``log_adapter`` (the
`ReplicatedLog` port over segment storage, plus snapshot files),
``client_api`` (Produce to ``__cluster_metadata-0``), ``node`` (the standalone
process), ``quorum_client`` and ``local_quorum`` (clients and process
harness for tests and the benchmark).
"""
