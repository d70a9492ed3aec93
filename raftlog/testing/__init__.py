"""Importable test harnesses: fakes for clock, network and disk, and a
deterministic simulator (STYLE.md section 2, after etcd's rafttest and
trio.testing)."""
