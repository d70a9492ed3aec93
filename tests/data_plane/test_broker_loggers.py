"""Broker loggers as a config resource (KIP-412): DescribeConfigs and
IncrementalAlterConfigs of ``BROKER_LOGGER`` are answered by the broker
itself (a single in-process broker), and change only its loggers."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from kio.schema.alter_configs.v2 import request as ac2
from kio.schema.describe_configs.v4 import request as dc4
from kio.schema.incremental_alter_configs.v1 import request as iac1
from single_broker import SingleBroker

from data_plane.broker_loggers import LEVELS, alter_levels, describe_levels, level_name
from raftlog.net.errors import ErrorCode

LOGGER = "raftlog.test.kip412"
SET, DELETE, APPEND = 0, 1, 2


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    made = logging.getLogger(LOGGER)
    root_level = logging.getLogger().level
    yield made
    made.setLevel(logging.NOTSET)
    logging.getLogger().setLevel(root_level)


@pytest.fixture
def broker() -> Iterator[SingleBroker]:
    single = SingleBroker()
    yield single
    single.close()


def test_levels_are_log4j_names_over_python_levels() -> None:
    assert [level_name(LEVELS[n]) for n in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR",
                                             "FATAL", "OFF")] == [
        "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"]
    assert level_name(logging.INFO + 5) == "INFO"  # between two: the one below
    assert level_name(logging.NOTSET) == "ALL"


def test_set_then_delete_inherits_again(logger: logging.Logger) -> None:
    logging.getLogger().setLevel(logging.INFO)
    assert alter_levels([(LOGGER, SET, "debug")], validate_only=False) == (ErrorCode.none, None)
    assert logger.level == logging.DEBUG
    assert (LOGGER, "DEBUG") in describe_levels()
    assert describe_levels()[0] == ("root", "INFO")
    assert alter_levels([(LOGGER, DELETE, None)], validate_only=False) == (ErrorCode.none, None)
    assert logger.level == logging.NOTSET and (LOGGER, "INFO") in describe_levels()


def test_all_or_nothing_and_validate_only(logger: logging.Logger) -> None:
    error, message = alter_levels([(LOGGER, SET, "ERROR"), ("root", SET, "LOUD")],
                                  validate_only=False)
    assert error == ErrorCode.invalid_config and "LOUD" in (message or "")
    assert logger.level == logging.NOTSET  # the valid change was not applied either
    assert alter_levels([(LOGGER, SET, "ERROR")], validate_only=True)[0] == ErrorCode.none
    assert logger.level == logging.NOTSET


@pytest.mark.parametrize(("change", "error", "text"), [
    (("no.such.logger.anywhere", SET, "INFO"), ErrorCode.invalid_config,
     "Logger no.such.logger.anywhere does not exist!"),
    (("root", DELETE, None), ErrorCode.invalid_request,
     "Removing the log level of the root logger is not allowed"),
    (("root", APPEND, "INFO"), ErrorCode.invalid_request, "APPEND and SUBTRACT"),
])
def test_refusals(change: tuple[str, int, str | None], error: ErrorCode, text: str) -> None:
    answer = alter_levels([change], validate_only=False)
    assert answer[0] == error and text in (answer[1] or "")


def _describe(broker: SingleBroker, name: str) -> object:
    return broker.call(32, dc4.DescribeConfigsRequest(resources=(dc4.DescribeConfigsResource(
        resource_type=8, resource_name=name, configuration_keys=None),),
        include_synonyms=False, include_documentation=False)).results[0]


def test_the_broker_answers_describe_and_alter_itself(
        broker: SingleBroker, logger: logging.Logger) -> None:
    described = _describe(broker, "1")
    assert described.error_code == ErrorCode.none
    levels = {str(c.name): (str(c.value), int(c.config_source)) for c in described.configs}
    assert levels["root"][1] == 6  # DYNAMIC_BROKER_LOGGER_CONFIG
    assert LOGGER in levels
    assert _describe(broker, "2").error_code == ErrorCode.invalid_request  # not this broker

    def alter(name: str, op: int, value: str | None, *, validate_only: bool = False) -> object:
        return broker.call(44, iac1.IncrementalAlterConfigsRequest(
            resources=(iac1.AlterConfigsResource(resource_type=8, resource_name=name, configs=(
                iac1.AlterableConfig(name=LOGGER, config_operation=op, value=value),)),),
            validate_only=validate_only)).responses[0]

    assert alter("1", SET, "TRACE").error_code == ErrorCode.none
    assert logger.level == LEVELS["TRACE"]
    assert {str(c.name): str(c.value) for c in _describe(broker, "1").configs}[LOGGER] == "TRACE"
    assert alter("1", SET, "WARN", validate_only=True).error_code == ErrorCode.none
    assert logger.level == LEVELS["TRACE"]
    other = alter("2", SET, "WARN")
    assert other.error_code == ErrorCode.invalid_request
    assert "expected 1, but received 2" in other.error_message
    # The legacy AlterConfigs does not change loggers.
    legacy = broker.call(33, ac2.AlterConfigsRequest(resources=(ac2.AlterConfigsResource(
        resource_type=8, resource_name="1", configs=(
            ac2.AlterableConfig(name=LOGGER, value="INFO"),)),), validate_only=False))
    assert legacy.responses[0].error_code == ErrorCode.invalid_request
    assert logger.level == LEVELS["TRACE"]
