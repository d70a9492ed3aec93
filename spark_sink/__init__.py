"""Spark: a foreachBatch writer and a Python Data Source for raftlog topics."""
