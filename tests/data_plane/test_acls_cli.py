"""data_plane.acls_cli: kafka-acls.sh's options, their expansion into ACLs,
its checks and its output lines (no cluster: what the command would send
and print)."""

from __future__ import annotations

import argparse

import pytest

from data_plane.acls_cli import (
    Entry,
    Pattern,
    cmd_acls,
    format_adding,
    format_current,
    operation_named,
    resource_entries,
    resource_filters,
)
from data_plane.admin_cli import CliError
from data_plane.cli import build_parser
from metadata_quorum.acls import AclOperation, AclPermissionType, PatternType, ResourceType

Op, T = AclOperation, ResourceType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
CLUSTER = Pattern(T.CLUSTER, "kafka-cluster", LIT)


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["acls", *argv, "--bootstrap-server", "127.0.0.1:1"])


def plan(*argv: str) -> dict[Pattern, set[tuple[str, str, str, str]]]:
    """The ACLs per resource, as (principal, host, OPERATION, PERMISSION)."""
    return {p: {(e.principal, e.host, e.operation.name, e.permission.name) for e in entries}
            for p, entries in resource_entries(parse(*argv)).items()}


def test_principals_hosts_and_operations_multiply_out() -> None:
    assert plan("--add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                "--allow-host", "10.0.0.1", "--deny-principal", "User:eve",
                "--operation", "Read", "--operation", "describe", "--topic", "orders",
                "--group", "g", "--resource-pattern-type", "PREFIXED") == {
        Pattern(T.TOPIC, "orders", PRE): (every := {
            ("User:alice", "10.0.0.1", "READ", "ALLOW"), ("User:bob", "10.0.0.1", "READ", "ALLOW"),
            ("User:alice", "10.0.0.1", "DESCRIBE", "ALLOW"),
            ("User:bob", "10.0.0.1", "DESCRIBE", "ALLOW"),
            ("User:eve", "*", "READ", "DENY"), ("User:eve", "*", "DESCRIBE", "DENY")}),
        Pattern(T.GROUP, "g", PRE): every}


def test_delegation_token_and_user_resources_take_the_token_operations() -> None:
    # KIP-48/KIP-373: CreateTokens/DescribeTokens on a user, Describe on a token.
    assert plan("--add", "--allow-principal", "User:ops", "--operation", "CreateTokens",
                "--operation", "DescribeTokens", "--user-principal", "User:svc") == {
        Pattern(T.USER, "User:svc", LIT): {("User:ops", "*", "CREATE_TOKENS", "ALLOW"),
                                           ("User:ops", "*", "DESCRIBE_TOKENS", "ALLOW")}}
    assert plan("--add", "--allow-principal", "User:ops", "--operation", "Describe",
                "--delegation-token", "tok-1") == {
        Pattern(T.DELEGATION_TOKEN, "tok-1", LIT): {("User:ops", "*", "DESCRIBE", "ALLOW")}}
    with pytest.raises(CliError, match=r"ResourceType USER only supports operations "
                                       r"\[ALL, CREATE_TOKENS, DESCRIBE_TOKENS\]"):
        resource_entries(parse("--add", "--allow-principal", "User:a", "--operation", "Read",
                               "--user-principal", "User:svc"))


def test_the_default_operation_is_all_and_the_default_host_is_any() -> None:
    assert plan("--add", "--allow-principal", "User:a", "--cluster") == {
        CLUSTER: {("User:a", "*", "ALL", "ALLOW")}}


def test_producer_and_consumer_expand_like_kafka_acls() -> None:
    """AclCommand: --producer gives Write, Describe, Create on topics, Write,
    Describe on transactional ids, IdempotentWrite on the cluster only with
    --idempotent; --consumer Read, Describe on topics and Read on groups."""
    def ops(mapping: dict[Pattern, set[tuple[str, str, str, str]]]) -> dict[Pattern, set[str]]:
        return {p: {op for _, _, op, _ in entries} for p, entries in mapping.items()}

    topic, tx, group = (Pattern(T.TOPIC, "t", LIT), Pattern(T.TRANSACTIONAL_ID, "x", LIT),
                        Pattern(T.GROUP, "g", LIT))
    assert ops(plan("--add", "--producer", "--allow-principal", "User:p", "--topic", "t",
                    "--transactional-id", "x", "--idempotent")) == {
        topic: {"WRITE", "DESCRIBE", "CREATE"}, tx: {"WRITE", "DESCRIBE"},
        CLUSTER: {"IDEMPOTENT_WRITE"}}
    # Without --idempotent the cluster gets nothing, even with --cluster.
    assert ops(plan("--add", "--producer", "--allow-principal", "User:p", "--topic", "t",
                    "--cluster")) == {topic: {"WRITE", "DESCRIBE", "CREATE"}}
    assert ops(plan("--add", "--consumer", "--allow-principal", "User:c", "--topic", "t",
                    "--group", "g")) == {topic: {"READ", "DESCRIBE"}, group: {"READ"}}
    assert ops(plan("--add", "--producer", "--consumer", "--allow-principal", "User:pc",
                    "--topic", "t", "--group", "g")) == {
        topic: {"WRITE", "DESCRIBE", "CREATE", "READ"}, group: {"READ"}}


def test_operation_names_are_kafka_acls_ones() -> None:
    assert operation_named("ClusterAction") is Op.CLUSTER_ACTION
    assert operation_named("IDEMPOTENTWRITE") is Op.IDEMPOTENT_WRITE
    assert operation_named("describeconfigs") is Op.DESCRIBE_CONFIGS
    assert operation_named(" All ") is Op.ALL
    for bad in ("cluster_action", "Any", "Unknown", "Fly"):
        with pytest.raises(CliError, match="unknown operation"):
            operation_named(bad)


@pytest.mark.parametrize("argv,message", [
    (["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
     "ResourceType GROUP only supports operations [ALL, READ, DELETE, DESCRIBE, "
     "DESCRIBE_CONFIGS, ALTER_CONFIGS]"),
    (["--add", "--allow-principal", "User:a", "--operation", "Read", "--cluster"],
     "ResourceType CLUSTER only supports operations"),
    (["--add", "--allow-principal", "alice", "--topic", "t"],
     "expected a string in format principalType:principalName but got alice"),
    (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
])
def test_what_the_plan_refuses(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=message.replace("[", r"\[")):
        resource_entries(parse(*argv))


@pytest.mark.parametrize("argv,message", [
    (["--list", "--allow-principal", "User:a"],
     "Option \"--list\" can't be used with option \"--allow-principal\""),
    (["--add", "--producer", "--operation", "Read", "--topic", "t"],
     "Option \"--producer\" can't be used with option \"--operation\""),
    (["--add", "--consumer", "--deny-principal", "User:a", "--topic", "t", "--group", "g"],
     "Option \"--consumer\" can't be used with option \"--deny-principal\""),
    (["--add", "--principal", "User:a", "--topic", "t"],
     "The --principal option is only available if --list is set"),
    (["--add", "--producer", "--allow-principal", "User:a"],
     "With --producer you must specify a --topic"),
    (["--add", "--idempotent", "--allow-principal", "User:a", "--topic", "t"],
     "The --idempotent option is only available if --producer is set"),
    (["--add", "--consumer", "--allow-principal", "User:a", "--topic", "t"],
     "With --consumer you must specify a --topic and a --group"),
    (["--add", "--consumer", "--allow-principal", "User:a", "--topic", "t", "--group", "g",
      "--cluster"], "no --cluster or --transactional-id"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "any"],
     "A '--resource-pattern-type' value of 'ANY' is not valid when adding acls."),
    (["--add", "--topic", "t"],
     "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."),
])
def test_kafka_acls_checks_refuse_before_connecting(argv: list[str], message: str) -> None:
    with pytest.raises(CliError) as raised:
        cmd_acls(parse(*argv))
    assert message in str(raised.value)


def test_remove_without_force_refuses_when_stdin_is_not_a_terminal() -> None:
    """pytest's stdin is not a terminal: nothing is asked, nothing sent."""
    with pytest.raises(CliError, match="stdin is not a terminal: give --force"):
        cmd_acls(parse("--remove", "--topic", "t"))


def test_exactly_one_action_and_known_pattern_types() -> None:
    for argv in (["--topic", "t"], ["--add", "--list"], ["--list", "--resource-pattern-type",
                                                          "regex"]):
        with pytest.raises(SystemExit) as exited:
            parse(*argv)
        assert exited.value.code == 2
    assert resource_filters(parse("--list", "--topic", "t", "--resource-pattern-type", "MATCH"),
                            required=False) == [Pattern(T.TOPIC, "t", PatternType.MATCH)]
    # --cluster is the cluster's literal pattern whatever the pattern type.
    assert resource_filters(parse("--list", "--cluster", "--resource-pattern-type", "any"),
                            required=False) == [CLUSTER]
    assert resource_filters(parse("--list"), required=False) == []


def test_output_lines_are_kafka_acls_ones() -> None:
    topic = Pattern(T.TOPIC, "orders", LIT)
    read = Entry("User:alice", "*", Op.READ, ALLOW)
    write = Entry("User:alice", "*", Op.WRITE, DENY)
    assert format_adding(topic, [write, read]) == [
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`: ",
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=DENY)",
        ""]
    assert format_current({Pattern(T.GROUP, "g", PRE): {read}, topic: {write, read}}) == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
        "patternType=LITERAL)`:",
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=DENY)",
        "",
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=g, "
        "patternType=PREFIXED)`:",
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        ""]
