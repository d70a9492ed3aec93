"""A sans-I/O KRaft core (KIP-595 pull-based Raft, KIP-630 snapshots, KIP-996 pre-vote).

The entry point is `raftlog.consensus.core.KRaftCore`: feed it messages with
`step`, time with `tick` and records with `propose`, then drain `ready()` and
handle the `Ready` in order (persist and fsync, send, apply) before calling
`advance`.
"""
