"""``raftlog cluster up|status|down``: a local cluster of real node processes
(`data_plane.local_cluster`), registered by `data_plane.admin_cli`.

- ``cluster up [--nodes 3] [--base-port 9092] [--dir DIR] [--detach]``
  formats and starts ``--nodes`` combined nodes on loopback (Kafka
  listeners on ``--base-port`` + i, controller listeners on
  ``--controller-base-port``, default ``--base-port`` + 1000), waits until
  the cluster is ready, prints the bootstrap servers and a status table,
  then stays in the foreground until Ctrl-C (or SIGTERM), which stops every
  node cleanly. With ``--detach`` it returns once ready; the bootstrap
  servers are the last line printed. A ``--dir`` that already holds a
  cluster starts that cluster again (same cluster id and ports; nothing is
  reformatted).
- ``cluster up --tls``: every listener SSL (the controllers' too), with a
  throwaway CA, a broker certificate for 127.0.0.1/localhost and a client
  certificate written under ``DIR/tls`` (`raftlog.security.dev_pki`; for
  trying TLS clients out, not for production). ``ssl.client.auth`` is
  ``requested``: a client may connect with the CA alone (``ANONYMOUS``) or
  also present the client certificate (``User:CN=client,OU=clients,O=raftlog``).
  It writes ``DIR/tls/client.properties`` for ``--command-config`` and
  prints the confluent-kafka settings.
- ``cluster status --dir DIR``: the table again (exit 1 if a node is down);
- ``cluster down --dir DIR``: SIGTERM every node, SIGKILL after ``--timeout-s``.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from typing import Any

from metadata_quorum.bootstrap import BootstrapError, parse_add_scram
from metadata_quorum.features import NEW_CLUSTER_FEATURES, parse_feature
from raftlog.security import dev_pki

from .admin_cli import CliError
from .local_cluster import (
    COMBINED,
    ClusterLayout,
    LocalCluster,
    LocalClusterError,
    Timeouts,
)

__all__ = ("register_cluster",)


def cmd_cluster_up(args: argparse.Namespace) -> int:
    directory = os.path.abspath(args.dir)
    try:
        if LocalCluster.exists(directory):
            cluster = LocalCluster.open(directory)
            print(f"Restarting the cluster {cluster.cluster_id} recorded in {directory} "
                  "(same cluster id and ports; storage is not reformatted)", flush=True)
            if args.nodes is not None or args.base_port is not None or args.tls:
                print("note: --nodes/--base-port/--tls are ignored for an existing cluster "
                      "(`raftlog cluster down` and remove the directory to change them)",
                      flush=True)
        else:
            if args.nodes is not None and args.nodes < 1:
                raise CliError("--nodes must be at least 1")
            layout = ClusterLayout.build(
                (COMBINED,) * (args.nodes or 3),
                base_port=args.base_port if args.base_port is not None else 9092,
                controller_base_port=args.controller_base_port,
                timeouts=Timeouts(),
                properties={**(_tls_properties(directory) if args.tls else {}),
                            **_properties(args.override)},
            )
            try:
                records = [parse_add_scram(spec) for spec in args.add_scram or ()]
                features = {**NEW_CLUSTER_FEATURES,
                            **dict(parse_feature(spec) for spec in args.feature or ())}
            except (BootstrapError, ValueError) as exc:
                raise CliError(str(exc)) from None
            cluster = LocalCluster(directory, layout, bootstrap_records=records,
                                   features=features)
            print(f"Formatting and starting a {len(layout.nodes)}-node cluster "
                  f"{cluster.cluster_id} in {directory}", flush=True)
        status = cluster.up(timeout_s=args.timeout_s)
    except LocalClusterError as exc:
        raise CliError(str(exc)) from None
    print("\n".join(cluster.status_lines(status)))
    tls_files = _tls_files(directory)
    if tls_files is not None:
        print("\n".join(_tls_lines(tls_files)))
    if args.detach:
        print(f"Stop it with: raftlog cluster down --dir {directory}")
        print("Bootstrap servers:")
        print(cluster.bootstrap_servers)
        return 0
    print(f"Bootstrap servers: {cluster.bootstrap_servers}")
    print("Running in the foreground; Ctrl-C stops the cluster.", flush=True)
    return _foreground(cluster)


def _foreground(cluster: LocalCluster) -> int:
    """Wait for Ctrl-C or SIGTERM, reporting nodes that exit; then stop all."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    reported: set[int] = set()
    try:
        while not stop.wait(1.0):
            for node in cluster.layout.nodes:
                if node.node_id not in reported and not cluster.is_alive(node.node_id):
                    reported.add(node.node_id)
                    print(f"node {node.node_id} exited (see {cluster.log_path(node.node_id)})",
                          flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    # A second Ctrl-C must not abort the shutdown halfway (nodes left running).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("\nStopping the cluster ...", flush=True)
    ended = cluster.stop()
    for node_id, how in sorted(ended.items()):
        print(f"node {node_id}: {how}")
    return 0


def cmd_cluster_status(args: argparse.Namespace) -> int:
    cluster = _open(args.dir)
    status = cluster.probe()
    print("\n".join(cluster.status_lines(status)))
    print(f"Bootstrap servers: {cluster.bootstrap_servers}")
    return 0 if len(status.alive) == len(cluster.layout.nodes) else 1


def cmd_cluster_down(args: argparse.Namespace) -> int:
    cluster = _open(args.dir)
    ended = cluster.stop(timeout_s=args.timeout_s)
    if not ended:
        print(f"No node of the cluster in {cluster.directory} is running.")
    for node_id, how in sorted(ended.items()):
        print(f"node {node_id}: {how}")
    return 0


def _open(directory: str) -> LocalCluster:
    try:
        return LocalCluster.open(os.path.abspath(directory))
    except LocalClusterError as exc:
        raise CliError(str(exc)) from None


def _tls_properties(directory: str) -> dict[str, str]:
    """A new cluster's TLS settings, after writing its PKI and the client
    properties under ``directory/tls``."""
    tls_dir = Path(directory) / "tls"
    pki = dev_pki.make_pki(tls_dir, servers=("broker",), clients=("client",),
                           password="raftlog-dev")
    client = pki.identities["client"]
    (tls_dir / "client.properties").write_text(
        "# raftlog cluster up --tls: for the raftlog CLI's --command-config\n"
        "security.protocol=SSL\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca_pem}\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={client.pem}\n")
    return {"listener.security.protocol.map": "PLAINTEXT:SSL,CONTROLLER:SSL",
            **pki.keystore_settings("broker"), **pki.truststore_settings(),
            "ssl.client.auth": "requested"}


def _tls_files(directory: str) -> Path | None:
    """``directory/tls`` when the cluster there was made with ``--tls``."""
    tls_dir = Path(directory) / "tls"
    return tls_dir if (tls_dir / "client.properties").is_file() else None


def _tls_lines(tls_dir: Path) -> list[str]:
    return [
        "TLS: every listener is SSL (a throwaway CA; client certificates optional)",
        f"  CA certificate:     {tls_dir / 'ca.pem'}",
        f"  client certificate: {tls_dir / 'client.cert.pem'} "
        f"(key {tls_dir / 'client.key.pem'})",
        f"  for the raftlog CLI: --command-config {tls_dir / 'client.properties'}",
        "  confluent-kafka: {'security.protocol': 'SSL', "
        f"'ssl.ca.location': '{tls_dir / 'ca.pem'}', "
        f"'ssl.certificate.location': '{tls_dir / 'client.cert.pem'}', "
        f"'ssl.key.location': '{tls_dir / 'client.key.pem'}'}}",
    ]


def _properties(items: list[str] | None) -> dict[str, str]:
    result = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--override {item!r} is not key=value")
        result[key.strip()] = value.strip()
    return result


def register_cluster(actions: Any) -> None:
    """Add up/status/down to the ``raftlog cluster`` subparsers ``actions``."""
    up = actions.add_parser("up", help="format and start a local cluster, wait until ready")
    up.add_argument("--nodes", type=int, default=None, help="combined nodes (default 3)")
    up.add_argument("--base-port", type=int, default=None,
                    help="Kafka listener of node i on BASE_PORT+i-1 (default 9092)")
    up.add_argument("--controller-base-port", type=int, default=None,
                    help="controller listeners (default BASE_PORT+1000)")
    up.add_argument("--dir", default=".", help="data, configs, logs and pids (default: .)")
    up.add_argument("--detach", action="store_true",
                    help="return once ready; the last line is the bootstrap servers")
    up.add_argument("--add-scram", action="append", metavar="MECHANISM=[name=N,password=P]",
                    help="a SCRAM credential the new cluster starts with, as storage format "
                         "--add-scram (KIP-900); repeatable")
    up.add_argument("--feature", action="append", metavar="NAME=LEVEL",
                    help="a feature level for the new cluster, as storage format --feature "
                         "(e.g. eligible.leader.replicas.version=0); repeatable")
    up.add_argument("--tls", action="store_true",
                    help="every listener SSL, with a throwaway CA and certificates written "
                         "under DIR/tls (new clusters; for trying TLS clients, not production)")
    up.add_argument("--override", action="append", metavar="KEY=VALUE",
                    help="a server.properties setting for every node (new clusters)")
    up.add_argument("--timeout-s", type=float, default=60.0, help="readiness timeout")
    up.set_defaults(func=cmd_cluster_up)

    status = actions.add_parser("status", help="nodes, pids, quorum leader, fenced brokers")
    status.add_argument("--dir", default=".")
    status.set_defaults(func=cmd_cluster_status)

    down = actions.add_parser("down", help="stop every node (SIGTERM, then SIGKILL)")
    down.add_argument("--dir", default=".")
    down.add_argument("--timeout-s", type=float, default=20.0)
    down.set_defaults(func=cmd_cluster_down)

