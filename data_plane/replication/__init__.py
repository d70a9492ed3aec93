"""Partition replication, sans-I/O (ARCHITECTURE.md "Partition replica",
"Followers"). Modules by role: ``types`` (the data in and out), ``isr``
(pure HW/ISR maths), ``leader`` and ``follower`` (one class per role),
``partition`` (`Partition`, which owns the role and its transitions).
`data_plane.partition` re-exports the public names."""
