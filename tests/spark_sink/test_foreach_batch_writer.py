"""`raftlog_sink` returns a closable writer: its state consumers (one per sink
id, kept across batches) are closed by `close` or a ``with`` block."""

from __future__ import annotations

from typing import Any, cast

from spark_sink.foreach_batch import ForeachBatchWriter, raftlog_sink


class FakeStore:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_close_closes_every_state_consumer_once_and_forgets_them() -> None:
    calls: list[tuple[Any, int]] = []
    stores = {"a": FakeStore(), "b": FakeStore()}
    writer = ForeachBatchWriter(lambda df, batch: calls.append((df, batch)),
                                cast(Any, stores))
    writer("df", 3)
    assert calls == [("df", 3)]
    kept = list(stores.values())
    with writer as same:
        assert same is writer
    assert [s.closed for s in kept] == [1, 1]
    assert stores == {}
    writer.close()  # nothing left to close
    assert [s.closed for s in kept] == [1, 1]


def test_raftlog_sink_returns_the_closable_writer() -> None:
    sink = raftlog_sink(bootstrap_servers="127.0.0.1:1", topic="t")
    assert isinstance(sink, ForeachBatchWriter)
    sink.close()  # no batch ran: no consumer was opened
