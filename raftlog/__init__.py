"""raftlog: the replicated log.

Kafka v2 record batches (`raftlog.records`), segment storage with a
leader-epoch cache (`raftlog.storage`), a sans-I/O KRaft consensus core
(`raftlog.consensus`) and Kafka-protocol transport (`raftlog.net`).

This package imports nothing from `metadata_quorum` or `data_plane`
(see ARCHITECTURE.md, "Layers").
"""
