"""What TLS costs: raftlog over PLAINTEXT against the same cluster over SSL.

    .venv/bin/python bench/tls_bench.py [--records N] [--one-count N] [--rounds N]

Two 3-node combined-mode clusters run at once (``data_plane.local_cluster``):
one whose broker listener is PLAINTEXT, one whose broker listener is SSL
(a test CA, an EC P-256 certificate, TLS 1.3; the followers fetch over it,
so replication pays for TLS too). Each round measures, for each cluster in
turn (the one that goes first alternating, so the host's drift weighs on
both alike), with the confluent-kafka (librdkafka) producer and ``acks=all``
to RF 3 topics with ``min.insync.replicas=2``:

- full load: ``--records`` 1 KiB records as fast as librdkafka takes them
  (``linger.ms=5``) to a 6-partition topic: MB/s, and server CPU per MB;
- one at a time: ``--one-count`` records to a 1-partition topic, each
  produced and ``flush()``-ed before the next: p50 and p99.

Prints each round, then a summary with the ratios of the SSL cluster's
figures to the PLAINTEXT cluster's (``ratio vs plaintext``); asserts
nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# produce_bench: this script's neighbour.
import produce_bench as pb

from raftlog.security import dev_pki

MB = pb.MB


def _cluster(root: Path, properties: dict[str, str]) -> object:
    from data_plane.local_cluster import ClusterLayout, LocalCluster

    layout = ClusterLayout.build(base_port=None,
                                 properties={"min.insync.replicas": "2", **properties})
    cluster = LocalCluster(root, layout)
    cluster.up(timeout_s=90)
    return cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--one-count", type=int, default=1_500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    payloads = pb.make_payloads(10_000, pb.RECORD_BYTES)
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as tmp, pb.sigterm_as_exit():
        root = Path(tmp)
        pki = dev_pki.make_pki(root / "pki", servers=("broker",), clients=())
        systems: dict[str, tuple[object, dict[str, object]]] = {}
        try:
            systems["plaintext"] = (_cluster(root / "plaintext", {}), {})
            systems["ssl"] = (_cluster(root / "ssl", {
                "listener.security.protocol.map": "PLAINTEXT:SSL,CONTROLLER:PLAINTEXT",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(pki.identities["broker"].pem),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(pki.ca_pem),
            }), {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)})
            return run(args, payloads, systems)
        finally:
            for cluster, _ in systems.values():
                cluster.stop(timeout_s=20)  # type: ignore[attr-defined]


def run(args: argparse.Namespace, payloads: list[bytes],
        systems: dict[str, tuple[object, dict[str, object]]]) -> int:
    throughput: dict[str, list[float]] = {name: [] for name in systems}
    cpu_per_mb: dict[str, list[float]] = {name: [] for name in systems}
    one: dict[str, list[float]] = {name: [] for name in systems}
    producers = {}
    for name, (cluster, security) in systems.items():
        bootstrap = cluster.bootstrap_servers  # type: ignore[attr-defined]
        pb.create_topic(bootstrap, "load", pb.PARTITIONS, security)
        pb.create_topic(bootstrap, "one", 1, security)
        producer = pb.kafka_producer(bootstrap, **{"linger.ms": 0, **security})
        pb.kafka_warm_up(producer, "one", 1, payloads)
        producers[name] = producer
    order = list(systems)
    for round_index in range(args.rounds):
        for name in order if round_index % 2 == 0 else reversed(order):
            cluster, security = systems[name]
            pids = list(cluster.pids.values())  # type: ignore[attr-defined]
            delivered, phase, _, errors = pb.kafka_full_load(
                cluster.bootstrap_servers, "load", payloads, args.records,  # type: ignore[attr-defined]
                "none", pids, security)
            mb = delivered * pb.RECORD_BYTES / MB
            throughput[name].append(mb / phase.elapsed)
            cpu_per_mb[name].append(phase.server_cpu / mb)
            samples = pb.kafka_one_at_a_time(producers[name], "one", payloads, args.one_count)
            one[name].extend(samples)
            p50, p99 = pb.percentiles(samples)
            print(f"round {round_index + 1} {name:9s}: full load {mb / phase.elapsed:6.1f} MB/s "
                  f"({errors} errors), servers {phase.server_cpu / mb * 1000:.1f} ms CPU/MB; "
                  f"one at a time p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
    for producer in producers.values():
        producer.flush(10)  # type: ignore[attr-defined]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    print("\nsummary (all rounds; MB = 10^6 bytes of record values)")
    for name in systems:
        p50, p99 = pb.percentiles(one[name])
        print(f"  {name:9s}: full load {mean(throughput[name]):6.1f} MB/s, "
              f"{mean(cpu_per_mb[name]) * 1000:.1f} ms server CPU/MB; "
              f"one at a time p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    ssl_p50, plain_p50 = pb.percentiles(one["ssl"])[0], pb.percentiles(one["plaintext"])[0]
    print(f"  full-load MB/s, ratio vs plaintext: "
          f"{mean(throughput['ssl']) / mean(throughput['plaintext']):.2f}")
    print(f"  server CPU per MB, ratio vs plaintext: "
          f"{mean(cpu_per_mb['ssl']) / mean(cpu_per_mb['plaintext']):.2f}")
    print(f"  one-at-a-time p50, ratio vs plaintext: {ssl_p50 / plain_p50:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
