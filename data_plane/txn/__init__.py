"""Idempotent and transactional producers (KIP-98, KIP-360, KIP-890): sans-I/O cores.

Modules, one concept each:

- ``producer_state``: per-partition producer state (sequence dedupe, epochs,
  ongoing transactions), its snapshots and its rebuild from the log.
- ``markers``: COMMIT/ABORT control batches (``EndTxnMarker``) and the
  WriteTxnMarkers request shape.
- ``lso``: the last stable offset and the aborted-transaction index
  (Kafka's ``.txnindex``) for ``isolation_level=read_committed``.
- ``txn_log``: ``__transaction_state`` key/value encoding and partition hashing.
- ``txn_metadata``: one transactional id's state and its transition table.
- ``coordinator``: the transaction coordinator state machine.

Nothing here does I/O, reads a clock or awaits (STYLE.md §1).
"""
