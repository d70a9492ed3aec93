"""The broker role of a node.

- `data_plane.broker.metadata_api`: the contract between the broker's
  metadata side (a Raft observer of the metadata log, registration and
  heartbeats with the active controller) and its data side (partitions,
  replica fetchers, the Kafka client API).
"""
