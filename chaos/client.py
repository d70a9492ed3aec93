"""Workload clients: real Kafka clients doing one history op at a time.

Each client is synchronous (confluent-kafka and kafka-python are) and is run
by the runner in a worker thread, so the runner's event loop (which also
hosts the link proxies) never blocks. A client method does the op and
returns ``(type, value)`` for the completion; the runner writes the
``invoke`` and the completion into the history.

- `ConfluentProducer`: acks=all, idempotence on or off. A delivery error is
  classified by `chaos.history.classify_error` (only definite errors are
  ``fail``); no delivery report before the flush deadline is ``info``.
- `KafkaPythonProducer`: kafka-python, acks=all, ``retries=0`` (it has no
  idempotence: a client retry could duplicate a write, and duplicates are
  checked), for variety.
- `ConfluentPoller`: an assign-based consumer on every partition from offset
  0, polling in batches and recording ``[offset, value]`` per partition.
- `ConfluentGroupPoller`: the same batches from a member of one consumer
  group (``subscribe``, classic or KIP-848 protocol, auto-commit), and
  `group_offsets`, the group's committed offsets after the run.
- `final_read`: a fresh read_committed consumer reads one partition from 0
  to its end (ListOffsets latest: the high watermark, or the last stable
  offset under transactions, then reads up to it).

Every client connects through an `Endpoint`: the bootstrap servers and, in
a TLS run, the CA and the client's certificate (mutual TLS), as librdkafka,
kafka-python and raftlog's own client each take them.

Values are the generator's unique ints, written as decimal strings. In
the keyed (compacted-topic) workload each record also has a key, the
decimal ``key_of(value, keys)``; readers given ``keys`` check it, and a
record stored under another key is recorded as the value
``"key-mismatch:<value>:<key>"``, which no send wrote (a phantom read).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from chaos.generator import key_of
from chaos.history import JSON, OpType, classify_error
from raftlog.net import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.security.tls import TlsSettings, client_context

Outcome = tuple[OpType, JSON]


@dataclass(frozen=True)
class ClientTls:
    """A TLS run's client files: the CA the brokers' certificates chain to,
    and the client's own certificate and key (the listeners require one)."""

    ca: Path
    certificate: Path  # the chain: leaf, then CA
    key: Path
    pem: Path  # key and chain in one file (Kafka's PEM keystore)


@dataclass(frozen=True)
class Endpoint:
    """Where the workload's clients connect, and how."""

    servers: str  # host:port,...
    tls: ClientTls | None = None

    def librdkafka(self) -> dict[str, Any]:
        """``bootstrap.servers`` and the security settings, for confluent-kafka."""
        conf: dict[str, Any] = {"bootstrap.servers": self.servers}
        if self.tls is not None:
            conf.update({"security.protocol": "SSL", "ssl.ca.location": str(self.tls.ca),
                         "ssl.certificate.location": str(self.tls.certificate),
                         "ssl.key.location": str(self.tls.key)})
        return conf

    def kafka_python(self) -> dict[str, Any]:
        """The same for kafka-python (which checks the host name too)."""
        conf: dict[str, Any] = {"bootstrap_servers": self.servers.split(",")}
        if self.tls is not None:
            conf.update(security_protocol="SSL", ssl_cafile=str(self.tls.ca),
                        ssl_certfile=str(self.tls.certificate), ssl_keyfile=str(self.tls.key),
                        ssl_check_hostname=True)
        return conf

    def security(self) -> ConnectionSecurity:
        """The same for raftlog's own client (`raftlog.net.KafkaProtocolClient`)."""
        if self.tls is None:
            return PLAINTEXT_SECURITY
        return ConnectionSecurity(tls=client_context(TlsSettings(
            keystore_type="PEM", keystore_location=str(self.tls.pem),
            truststore_type="PEM", truststore_location=str(self.tls.ca))))


class SendClient(Protocol):
    def send(self, partition: int, value: int, key: int | None = None) -> Outcome: ...
    def close(self) -> None: ...


def _err_name(err: object) -> str:
    if isinstance(err, KafkaError):
        return str(err.name())
    return type(err).__name__


class ConfluentProducer:
    """One producer of one client process (acks=all)."""

    def __init__(
        self,
        endpoint: Endpoint,
        topic: str,
        *,
        idempotent: bool,
        timeout_s: float = 6.0,
        transactional_id: str | None = None,
    ) -> None:
        self.topic = topic
        self.timeout_s = timeout_s
        conf: dict[str, Any] = {
            **endpoint.librdkafka(),
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 0,
            "message.timeout.ms": int(timeout_s * 1000) - 500,
            "request.timeout.ms": 2500,
            "socket.timeout.ms": 3000,
            "reconnect.backoff.max.ms": 500,
            "log_level": 0,
            "retry.backoff.ms": 100,
        }
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            # Short, so the coordinator aborts what a crashed client left open
            # and the LSO (read_committed readers) moves on within a run.
            conf["transaction.timeout.ms"] = 10000
        self.p = Producer(conf)
        self.transactional = transactional_id is not None
        if self.transactional:
            self.p.init_transactions(timeout_s)

    def send(self, partition: int, value: int, key: int | None = None) -> Outcome:
        done: list[tuple[Any, Any]] = []
        base = _send_value(partition, value, key)
        self.p.produce(
            self.topic,
            str(value).encode(),
            key=None if key is None else str(key).encode(),
            partition=partition,
            on_delivery=lambda err, msg: done.append((err, msg)),
        )
        self.p.flush(self.timeout_s)
        if not done:
            return OpType.INFO, {**base, "error": "no report"}
        err, msg = done[0]
        if err is not None:
            name = _err_name(err)
            return classify_error(name), {**base, "error": name}
        return OpType.OK, {**base, "offset": msg.offset()}

    def txn(self, sends: list[tuple[int, int, int | None]], abort: bool) -> Outcome:
        """A transaction of sends; commit it, or abort it when ``abort``.

        An abort first flushes, so the aborted records are in the log (a
        read_committed reader that returns one is an aborted read), then
        aborts: ``fail``, certainly invisible. A commit returns ``ok`` with
        the offset of every record. An error that requires an abort, aborted
        successfully, is ``fail``; anything else (a commit timing out, a
        fenced or fatal producer) is ``info``: it may have committed.
        """
        value: dict[str, JSON] = {
            "sends": [_send_value(p, v, k) for p, v, k in sends],
            "abort": abort,
        }
        reports: dict[int, int] = {}  # value -> offset

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                reports[_int(msg.value()) or 0] = int(msg.offset())

        try:
            self.p.begin_transaction()
            for p, v, k in sends:
                self.p.produce(self.topic, str(v).encode(), partition=p,
                               key=None if k is None else str(k).encode(),
                               on_delivery=on_delivery)
            if abort:
                self.p.flush(self.timeout_s)
                self.p.abort_transaction(self.timeout_s)
                return OpType.FAIL, value  # aborted: certainly invisible
            self.p.commit_transaction(self.timeout_s)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            value["error"] = _err_name(err)
            if isinstance(err, KafkaError) and err.txn_requires_abort():
                try:
                    self.p.abort_transaction(self.timeout_s)
                    value["aborted_after_error"] = True
                    return OpType.FAIL, value
                except KafkaException:
                    pass
            return OpType.INFO, value
        value["sends"] = [{**_send_value(p, v, k), "offset": reports.get(v)} for p, v, k in sends]
        return OpType.OK, value

    def close(self) -> None:
        if not self.transactional:
            self.p.flush(0.5)


class KafkaPythonProducer:
    """kafka-python producer (acks=all, no retries: no client-made duplicates)."""

    def __init__(self, endpoint: Endpoint, topic: str, *, timeout_s: float = 6.0) -> None:
        from kafka import KafkaProducer  # type: ignore[import-untyped]

        self.topic = topic
        self.timeout_s = timeout_s
        self.p = KafkaProducer(
            **endpoint.kafka_python(),
            acks="all",
            retries=0,
            request_timeout_ms=3000,
            max_block_ms=3000,
            linger_ms=0,
            enable_idempotence=False,
            reconnect_backoff_max_ms=500,
        )

    def send(self, partition: int, value: int, key: int | None = None) -> Outcome:
        from kafka.errors import KafkaError as KPError  # type: ignore[import-untyped]
        from kafka.errors import KafkaTimeoutError

        base = _send_value(partition, value, key)
        try:
            fut = self.p.send(self.topic, str(value).encode(), partition=partition,
                              key=None if key is None else str(key).encode())
            md = fut.get(timeout=self.timeout_s)
        except KafkaTimeoutError as exc:
            return OpType.INFO, {**base, "error": type(exc).__name__}
        except KPError as exc:
            # kafka-python names errors in CamelCase; classify by the Kafka name.
            name = str(getattr(exc, "message", type(exc).__name__))
            return classify_error(name), {**base, "error": name}
        return OpType.OK, {**base, "offset": md.offset}

    def close(self) -> None:
        self.p.close(timeout=1)


#: What every workload consumer shares: from the start, read_committed, quiet,
#: quick to notice a dead broker and to come back.
_POLLER_CONFIG: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "log_level": 0,
    "socket.timeout.ms": 3000,
    "reconnect.backoff.max.ms": 500,
    "fetch.wait.max.ms": 200,
}


class ConfluentPoller:
    """Assign-based consumer over all partitions from 0; one poll = one batch."""

    def __init__(self, endpoint: Endpoint, topic: str, partitions: int, keys: int = 0) -> None:
        self.keys = keys
        self.c = Consumer(
            {
                **_POLLER_CONFIG,
                **endpoint.librdkafka(),
                "group.id": f"chaos-poll-{id(self)}",
                "enable.auto.commit": False,
            }
        )
        self.c.assign([CTP(topic, p, OFFSET_BEGINNING) for p in range(partitions)])

    def poll(self) -> Outcome:
        return _poll_batch(self.c, self.keys)

    def close(self) -> None:
        self.c.close()


class ConfluentGroupPoller:
    """A member of the run's consumer group (``subscribe``), with the classic
    or the KIP-848 protocol; offsets of what each poll returned are committed
    automatically (librdkafka stores them as consume() returns them)."""

    def __init__(self, endpoint: Endpoint, topic: str, group_id: str, protocol: str,
                 keys: int = 0) -> None:
        self.keys = keys
        self.topic = topic
        # The classic protocol's timeouts are the client's (KIP-848's are the
        # broker's: `chaos.runner.GROUP_PROPERTIES`).
        classic = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500} \
            if protocol == "classic" else {}
        self._config = {
            **_POLLER_CONFIG,
            **classic,
            **endpoint.librdkafka(),
            "group.id": group_id,
            "group.protocol": protocol,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
        }
        self.restarts = 0
        self.c = self._subscribe()

    def _subscribe(self) -> Any:
        c = Consumer(self._config)
        c.subscribe([self.topic])
        return c

    def poll(self) -> Outcome:
        op, value = _poll_batch(self.c, self.keys)
        if isinstance(value, dict) and "fatal" in value:
            # A fatal error ends a librdkafka consumer for good; an application
            # replaces it, and so do we. (A KIP-848 member fenced while its
            # group went back to classic gets GROUP_ID_NOT_FOUND on its next
            # heartbeat, as from Kafka, and librdkafka treats that as fatal.)
            with contextlib.suppress(Exception):
                self.c.close()
            self.c = self._subscribe()
            self.restarts += 1
        return op, value

    def close(self) -> None:
        self.c.close()


def _poll_batch(c: Any, keys: int) -> Outcome:
    """One consume() of up to 200 records: ``{"records": {partition: [[offset, value]]}}``,
    with ``"fatal"``: the error, if the consumer hit a fatal one (it reads no more)."""
    records: dict[str, list[list[int | str | None]]] = {}
    try:
        msgs = c.consume(num_messages=200, timeout=0.5)
    except KafkaException as exc:
        return OpType.INFO, {"error": str(exc)}
    fatal: str | None = None
    for m in msgs:
        err = m.error()
        if err is not None:
            if err.fatal():
                fatal = str(err)
            continue
        records.setdefault(str(m.partition()), []).append([m.offset(), _read(m, keys)])
    if fatal is not None:
        return OpType.OK, {"records": records, "fatal": fatal}
    return OpType.OK, {"records": records}


def group_offsets(endpoint: Endpoint, topic: str, partitions: int, group_id: str,
                  timeout_s: float = 15.0) -> Outcome:
    """The group's committed offsets of ``topic`` (-1: none), for `CommittedUnread`."""
    admin = AdminClient({**endpoint.librdkafka(), "log_level": 0})
    wanted = ConsumerGroupTopicPartitions(group_id, [CTP(topic, p) for p in range(partitions)])
    try:
        listed = admin.list_consumer_group_offsets([wanted], request_timeout=timeout_s)[
            group_id].result(timeout=timeout_s)
    except Exception as exc:
        return OpType.INFO, {"error": str(exc)}
    offsets: dict[str, JSON] = {str(tp.partition): int(tp.offset)
                                for tp in listed.topic_partitions or () if tp.error is None}
    return OpType.OK, {"group": group_id, "offsets": offsets}


def _send_value(partition: int, value: int, key: int | None) -> dict[str, JSON]:
    out: dict[str, JSON] = {"partition": partition, "value": value}
    if key is not None:
        out["key"] = key
    return out


def _read(m: Any, keys: int) -> int | str | None:
    """A read record's value; with ``keys``, checked against its key."""
    value = _int(m.value())
    if keys and value is not None:
        key = m.key()
        if key != str(key_of(value, keys)).encode():
            return f"key-mismatch:{value}:{key!r}"
    return value


def _int(raw: bytes | str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def final_read(
    endpoint: Endpoint, topic: str, partition: int, *, timeout_s: float = 30.0, keys: int = 0
) -> Outcome:
    """Read ``partition`` from 0 to its high watermark (ListOffsets latest)."""
    # Under read_committed the end is the last stable offset, and the last
    # offsets may be transaction markers (or aborted records) that no message
    # ever carries: reaching the end is known from the partition-EOF event,
    # whose offset is the consumer's position.
    c = Consumer(
        {
            **endpoint.librdkafka(),
            "group.id": f"chaos-final-{partition}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                _low, high = c.get_watermark_offsets(CTP(topic, partition), timeout=3)
                break
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    return OpType.INFO, {"partitions": [partition], "error": str(exc)}
        c.assign([CTP(topic, partition, OFFSET_BEGINNING)])
        got: list[list[int | str | None]] = []
        pos = 0
        while pos < high:
            if time.monotonic() > deadline:
                return OpType.INFO, {
                    "partitions": [partition],
                    "error": "timeout",
                    "read_to": pos,
                    "end": high,
                }
            for m in c.consume(num_messages=500, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pos = max(pos, int(m.offset() or 0))
                    continue
                got.append([m.offset(), _read(m, keys)])
                pos = int(m.offset() or 0) + 1
        return OpType.OK, {
            "partitions": [partition],
            "records": {str(partition): got},
            "end_offsets": {str(partition): high},
        }
    finally:
        c.close()


def transactions_available(endpoint: Endpoint, timeout_s: float = 8.0) -> bool:
    """Whether InitProducerId with a transactional id works on this cluster
    (transactions are being wired; the txn workload is used only if so)."""
    result: list[bool] = []

    def probe() -> None:
        try:
            p = Producer(
                {**endpoint.librdkafka(), "transactional.id": "chaos-probe", "log_level": 0}
            )
            p.init_transactions(timeout_s)
            result.append(True)
        except Exception:
            result.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout_s + 2)
    return bool(result and result[0])
