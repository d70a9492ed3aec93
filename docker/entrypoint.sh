#!/bin/sh
# Container entry point, in the manner of Kafka's images: settings come from
# RAFTLOG_<NAME> environment variables (RAFTLOG_NODE_ID -> node.id, see
# data_plane/config.py), the storage is formatted on first start with
# CLUSTER_ID (already formatted directories are left alone), then the node
# runs in the foreground. Extra properties may be mounted at
# $RAFTLOG_CONFIG_FILE.
set -eu
CONFIG="${RAFTLOG_CONFIG_FILE:-/etc/raftlog/server.properties}"
mkdir -p "$(dirname "$CONFIG")"
[ -f "$CONFIG" ] || : > "$CONFIG"
: "${CLUSTER_ID:?set CLUSTER_ID (raftlog storage random-uuid makes one)}"
raftlog storage format --cluster-id "$CLUSTER_ID" --config "$CONFIG" --ignore-formatted
exec raftlog server start "$CONFIG"
