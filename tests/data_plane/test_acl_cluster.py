"""ACLs on a real 3-node cluster (KIP-801's StandardAuthorizer): the broker
and controller listeners are SASL_PLAINTEXT with PLAIN users, ``User:broker``
(the nodes' own login, on both) and ``User:admin`` are super users, and
everyone else may do only what an ACL allows, on brokers and controllers
alike. `raftlog acls` (kafka-acls.sh) manages the ACLs;
real clients (librdkafka) are refused and then served as ACLs come and go.
Replication runs as the super user ``broker``: acks=all with
min.insync.replicas=2 is acknowledged only after two followers fetched.
Delegation tokens (KIP-373): a token for another owner needs CREATE_TOKENS
on that user, and another owner's tokens are seen with DESCRIBE_TOKENS."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import cli, eventually, module_cluster_with
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from data_plane.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(300)

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
USERS = {"broker": "broker-secret", "admin": "admin-secret", "alice": "alice-secret",
         "bob": "bob-secret"}
JAAS = (f'{PLAIN} required username="broker" password="broker-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
PROPERTIES = {
    "min.insync.replicas": "2",
    "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.mechanism.controller.protocol": "PLAIN",
    "listener.name.plaintext.plain.sasl.jaas.config": JAAS,
    "listener.name.controller.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:broker;User:admin",
    "delegation.token.secret.key": "acl-cluster-token-secret",
}


cluster = module_cluster_with(PROPERTIES, up_timeout_s=60)


def login(user: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}


def command_config(tmp_path: Path, user: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    f"sasl.username={user}\nsasl.password={USERS[user]}\n", encoding="utf-8")
    return str(path)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def produce(cluster: LocalCluster, user: str, topic: str, values: range) -> list[str]:
    """Deliver ``values`` as ``user``; the error names, one per record ("" when delivered)."""
    outcomes: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 10_000, "retries": 0, **login(user)})
    for v in values:
        producer.produce(topic, str(v).encode(), partition=0, on_delivery=lambda err, msg:
                         outcomes.append("" if err is None else err.name()))
    producer.flush(30)
    return outcomes


def consume(cluster: LocalCluster, user: str, topic: str, group: str, count: int,
            timeout_s: float = 15) -> tuple[list[int], list[str]]:
    """Up to ``count`` values read by a group member as ``user``, and the
    errors it was told."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", **login(user)})
    consumer.subscribe([topic])
    values: list[int] = []
    errors: list[str] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            errors.append(msg.error().name())
            if msg.error().code() in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                      KafkaError.TOPIC_AUTHORIZATION_FAILED):
                break
            continue
        values.append(int(msg.value()))
    consumer.close()
    return values, errors


def all_brokers_list(cluster: LocalCluster, config: str, principal: str, name: str,
                     kind: str = "--topic") -> None:
    """Every broker's DescribeAcls (its own image) lists ``principal`` on the resource."""
    for node in cluster.layout.nodes:
        out = ok(cli("acls", "--list", kind, name, "--bootstrap-server",
                     f"127.0.0.1:{node.kafka_port}", "--command-config", config))
        assert f"principal={principal}," in out, (node.node_id, out)


def test_clients_are_refused_until_an_acl_allows_them(cluster: LocalCluster,
                                                      tmp_path: Path) -> None:
    b, admin = cluster.bootstrap_servers, command_config(tmp_path, "admin")
    ok(cli("topics", "create", "--topic", "orders", "--partitions", "1", "--replication-factor",
           "3", "--bootstrap-server", b, "--command-config", admin))
    # alice has no ACL: her records are refused, and the topic is hidden from her.
    assert set(produce(cluster, "alice", "orders", range(3))) == {"TOPIC_AUTHORIZATION_FAILED"}
    seen = AdminClient({"bootstrap.servers": b, **login("alice")}).list_topics(timeout=10)
    assert "orders" not in seen.topics
    # A non-super user may not manage ACLs either.
    alice_config = command_config(tmp_path, "alice")
    refused = cli("acls", "--add", "--allow-principal", "User:alice", "--producer", "--topic",
                  "orders", "--bootstrap-server", b, "--command-config", alice_config)
    assert refused.returncode == 2 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr

    ok(cli("acls", "--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders",
           "--bootstrap-server", b, "--command-config", admin))
    # Each broker authorizes from its own image: wait until all have the ACL
    # (a client's Metadata may go to any of them).
    eventually(lambda: all_brokers_list(cluster, admin, "User:alice", "orders"), timeout_s=20)
    assert produce(cluster, "alice", "orders", range(50)) == [""] * 50  # acks=all, RF 3

    # bob may read nothing yet; then the group and the topic, as --consumer gives.
    values, errors = consume(cluster, "bob", "orders", "bob-group", 50, timeout_s=10)
    assert values == [] and errors, errors
    ok(cli("acls", "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "orders",
           "--group", "bob-group", "--bootstrap-server", b, "--command-config", admin))

    eventually(lambda: all_brokers_list(cluster, admin, "User:bob", "bob-group", "--group"),
               timeout_s=20)
    values, errors = consume(cluster, "bob", "orders", "bob-group", 50, timeout_s=30)
    assert values == list(range(50)), (values, errors)

    # A DENY beats the ALLOW: bob's next read is refused.
    ok(cli("acls", "--add", "--deny-principal", "User:bob", "--operation", "Read", "--topic",
           "orders", "--bootstrap-server", b, "--command-config", admin))

    def bob_denied() -> None:
        values, errors = consume(cluster, "bob", "orders", "bob-group", 50, timeout_s=10)
        assert values == [] and "TOPIC_AUTHORIZATION_FAILED" in errors, (values, errors)
    eventually(bob_denied, timeout_s=40)


def test_cli_acls_add_list_and_remove(cluster: LocalCluster, tmp_path: Path) -> None:
    """`raftlog acls` (kafka-acls.sh): CreateAcls and DeleteAcls forwarded by
    a broker to the controller, DescribeAcls answered by the brokers (and the
    controllers) from their metadata image, librdkafka reading the same
    ACLs."""
    b, admin = cluster.bootstrap_servers, command_config(tmp_path, "admin")
    auth = ("--command-config", admin)
    resource = "ResourcePattern(resourceType=TOPIC, name=acl-orders, patternType=LITERAL)"

    def entry(principal: str, operation: str) -> str:
        return f"\t(principal={principal}, host=*, operation={operation}, permissionType=ALLOW)"

    out = cli("acls", "--add", "--allow-principal", "User:acl-alice", "--operation", "Read",
              "--operation", "Describe", "--topic", "acl-orders", "--bootstrap-server", b, *auth)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (f"Adding ACLs for resource `{resource}`: \n"
                          f" {entry('User:acl-alice', 'READ')}\n"
                          f"{entry('User:acl-alice', 'DESCRIBE')}\n\n")
    ok(cli("acls", "--add", "--allow-principal", "User:acl-app", "--producer", "--topic",
           "acl-orders", "--bootstrap-server", b, *auth))
    alice = [entry("User:acl-alice", "READ"), entry("User:acl-alice", "DESCRIBE")]
    app = [entry("User:acl-app", op) for op in ("WRITE", "CREATE", "DESCRIBE")]

    def listed() -> None:
        text = cli("acls", "--list", "--topic", "acl-orders", "--bootstrap-server", b,
                   *auth).stdout
        assert text == "\n".join([f"Current ACLs for resource `{resource}`:", *alice, *app,
                                  "", ""]), text
    eventually(listed)
    # Adding one again says so, and adds nothing.
    out = cli("acls", "--add", "--allow-principal", "User:acl-alice", "--operation", "Read",
              "--topic", "acl-orders", "--bootstrap-server", b, *auth)
    assert out.returncode == 0 and out.stdout == (
        f"Acl (pattern={resource}, entry={entry('User:acl-alice', 'READ')[1:]}) "
        "already exists.\n"), out.stdout
    text = cli("acls", "--list", "--principal", "User:acl-alice", "--bootstrap-controller",
               cluster.bootstrap_controllers, *auth).stdout
    assert text == "\n".join(["ACLs for principal `User:acl-alice`",
                              f"Current ACLs for resource `{resource}`:", *alice, "", ""]), text
    admin_client = AdminClient({"bootstrap.servers": b, **login("admin")})
    bindings = admin_client.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, "acl-orders", ResourcePatternType.LITERAL, None, None,
        AclOperation.ANY, AclPermissionType.ANY)).result(10)
    assert sorted((x.principal, x.operation.name) for x in bindings) == [
        ("User:acl-alice", "DESCRIBE"), ("User:acl-alice", "READ"), ("User:acl-app", "CREATE"),
        ("User:acl-app", "DESCRIBE"), ("User:acl-app", "WRITE")]
    # Refused: an empty topic name (the controller's message), --remove without --force.
    bad = cli("acls", "--add", "--allow-principal", "User:x", "--operation", "Read", "--topic",
              "", "--bootstrap-server", b, *auth)
    assert bad.returncode == 2 and "INVALID_REQUEST: Invalid empty resource name" in bad.stderr
    refused = cli("acls", "--remove", "--topic", "acl-orders", "--bootstrap-server", b, *auth,
                  stdin="")
    assert refused.returncode == 2 and "give --force" in refused.stderr
    out = cli("acls", "--remove", "--force", "--allow-principal", "User:acl-alice", "--operation",
              "Read", "--topic", "acl-orders", "--bootstrap-server", b, *auth)
    assert out.returncode == 0 and out.stdout == "", out.stderr

    def one_removed() -> None:
        text = cli("acls", "--list", "--topic", "acl-orders", "--bootstrap-server", b,
                   *auth).stdout
        assert text == "\n".join([f"Current ACLs for resource `{resource}`:", alice[1], *app,
                                  "", ""]), text
    eventually(one_removed)
    ok(cli("acls", "--remove", "--force", "--topic", "acl-orders", "--bootstrap-server", b, *auth))

    def gone() -> None:
        text = cli("acls", "--list", "--topic", "acl-orders", "--bootstrap-server", b,
                   *auth).stdout
        assert text == "", text
    eventually(gone)


def test_internal_work_runs_as_the_super_user(cluster: LocalCluster) -> None:
    """Transactions need brokers to call each other (AddPartitionsToTxn
    verification, WriteTxnMarkers: CLUSTER_ACTION); as super users they may."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **login("admin")})
    for future in admin.create_topics([NewTopic("txn-acl", 1, 3)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "transactional.id": "acl-txn", **login("admin")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce("txn-acl", str(i).encode(), partition=0)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "txn-acl",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         **login("admin")})
    consumer.subscribe(["txn-acl"])
    values: list[int] = []
    deadline = time.monotonic() + 30
    while len(values) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(int(msg.value()))
    consumer.close()
    assert values == list(range(5))


def test_the_controllers_authenticate_and_authorize_too(
    cluster: LocalCluster, tmp_path: Path,
) -> None:
    """The quorum and the brokers log in to the controller listener as
    ``broker`` (a super user: its Vote, Fetch, BrokerHeartbeat and
    forwarded requests need CLUSTER_ACTION or more); a client that speaks
    to the controllers is checked as a broker would check it."""
    c = cluster.bootstrap_controllers
    assert cluster.controller_security.protocol == "SASL_PLAINTEXT"
    # The cluster came up and elected a leader: the quorum authenticated.
    status = ok(cli("quorum", "describe", "--status", "--bootstrap-controller", c,
                    "--command-config", command_config(tmp_path, "admin")))
    assert "LeaderId" in status
    # Without a login the controllers say nothing.
    refused = cli("quorum", "describe", "--status", "--bootstrap-controller", c, "--timeout-ms", "3000")
    assert refused.returncode == 2, refused.stdout
    # alice logs in, but may not describe the quorum or change ACLs there.
    alice = ("--command-config", command_config(tmp_path, "alice"))
    denied = cli("quorum", "describe", "--status", "--bootstrap-controller", c, *alice)
    assert denied.returncode == 2 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr, \
        denied.stderr
    denied = cli("acls", "--add", "--allow-principal", "User:alice", "--operation", "All",
                 "--topic", "*", "--bootstrap-controller", c, *alice)
    assert denied.returncode == 2 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr, \
        denied.stderr
    denied = cli("topics", "create", "--topic", "by-alice", "--partitions", "1",
                 "--replication-factor", "3", "--bootstrap-controller", c, *alice)
    assert denied.returncode == 2 and "TOPIC_AUTHORIZATION_FAILED" in denied.stderr, \
        denied.stderr


def _tokens(cluster: LocalCluster, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("delegation-tokens", "--bootstrap-server", cluster.bootstrap_servers,
               "--command-config", config, "--timeout-ms", "15000", *args)


def _token_ids(described: str) -> list[str]:
    return [line.split()[0] for line in described.splitlines()[2:]]


def test_tokens_for_other_owners_and_their_descriptions_need_acls(
    cluster: LocalCluster, tmp_path: Path,
) -> None:
    alice, bob = command_config(tmp_path, "alice"), command_config(tmp_path, "bob")
    admin = command_config(tmp_path, "admin")
    # Her own token needs no ACL (the controller gets her principal in an Envelope).
    own = ok(_tokens(cluster, alice, "--create", "--max-life-time-period", "-1"))
    own_id = own.splitlines()[2].split()[0]
    assert own.splitlines()[2].split()[2:4] == ["User:alice", "User:alice"]
    refused = _tokens(cluster, alice, "--create", "--max-life-time-period", "-1",
                      "--owner-principal", "User:bob")
    assert refused.returncode == 2
    assert "DELEGATION_TOKEN_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr

    ok(cli("acls", "--add", "--allow-principal", "User:alice", "--operation", "CreateTokens",
           "--user-principal", "User:bob", "--bootstrap-server", cluster.bootstrap_servers,
           "--command-config", admin))

    def for_bob() -> str:
        made = _tokens(cluster, alice, "--create", "--max-life-time-period", "-1",
                       "--owner-principal", "User:bob")
        assert made.returncode == 0, made.stderr
        return made.stdout
    row = eventually(for_bob, timeout_s=20).splitlines()[2].split()
    bob_id = row[0]
    assert row[2:4] == ["User:bob", "User:alice"]  # owner bob, requested by alice

    # bob sees the token he owns, not alice's own; alice sees both (owner, requester).
    assert _token_ids(ok(_tokens(cluster, bob, "--describe"))) == [bob_id]
    assert sorted(_token_ids(ok(_tokens(cluster, alice, "--describe")))) == sorted(
        [own_id, bob_id])
    ok(cli("acls", "--add", "--allow-principal", "User:bob", "--operation", "DescribeTokens",
           "--user-principal", "User:alice", "--bootstrap-server", cluster.bootstrap_servers,
           "--command-config", admin))

    def bob_sees_alices() -> None:
        assert sorted(_token_ids(ok(_tokens(cluster, bob, "--describe")))) == sorted(
            [own_id, bob_id])
    eventually(bob_sees_alices, timeout_s=20)
