"""Importable harnesses for the data plane: a fake controller for one
partition, deliberately broken replication cores, and the deterministic
replication simulation (`replication_sim`)."""
