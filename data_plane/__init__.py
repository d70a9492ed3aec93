"""Brokers: partitions, replication, client APIs, node composition and the `raftlog` CLI."""
