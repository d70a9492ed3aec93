"""A broker's loggers as a config resource (KIP-412, ``BROKER_LOGGER``).

``kafka-configs.sh --entity-type broker-loggers --entity-name ID`` describes
and changes the log levels of one running broker. As in Kafka, the change is
the broker's alone and lasts until it restarts: nothing goes to the
controller or the metadata log.

The loggers are the process's Python loggers (``raftlog.net.server``,
``data_plane.broker.replica_manager`` ...) and ``root``; levels take
Kafka's log4j names, mapped onto Python's (TRACE is below DEBUG, FATAL is
CRITICAL, OFF is above every level). IncrementalAlterConfigs SET sets a
level; DELETE unsets it (the logger inherits its parent's again), which
``root`` refuses; APPEND and SUBTRACT do not apply.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from raftlog.net.errors import ErrorCode

__all__ = ("BROKER_LOGGER_RESOURCE", "LEVELS", "ROOT", "alter_levels", "describe_levels")

BROKER_LOGGER_RESOURCE: Final = 8
ROOT: Final = "root"
#: log4j level name -> Python level.
LEVELS: Final = {"ALL": 1, "TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
                 "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
                 "OFF": logging.CRITICAL + 50}
_NAMES_DOWN: Final = sorted(((level, name) for name, level in LEVELS.items()), reverse=True)
_SET, _DELETE = 0, 1


def _logger(name: str) -> logging.Logger | None:
    if name == ROOT:
        return logging.getLogger()
    found = logging.Logger.manager.loggerDict.get(name)
    return found if isinstance(found, logging.Logger) else None


def level_name(level: int) -> str:
    """The log4j name of a Python level: the highest named level at or below it."""
    return next((name for value, name in _NAMES_DOWN if value <= level), "ALL")


def describe_levels() -> list[tuple[str, str]]:
    """(logger, effective level name) for ``root`` and every logger, sorted."""
    names = sorted(name for name, found in logging.Logger.manager.loggerDict.items()
                   if isinstance(found, logging.Logger))
    return [(name, level_name(logging.getLogger(name if name != ROOT else None)
                              .getEffectiveLevel())) for name in [ROOT, *names]]


def alter_levels(changes: Sequence[tuple[str, int, str | None]], *,
                 validate_only: bool) -> tuple[ErrorCode, str | None]:
    """Apply IncrementalAlterConfigs ``(logger, operation, value)`` changes,
    all or none: the first invalid one is the answer's error."""
    checked: list[tuple[logging.Logger, int]] = []
    for name, operation, value in changes:
        logger = _logger(name)
        if operation not in (_SET, _DELETE):
            return (ErrorCode.invalid_request,
                    f"APPEND and SUBTRACT do not apply to broker loggers ({name})")
        if logger is None:
            return ErrorCode.invalid_config, f"Logger {name} does not exist!"
        if operation == _DELETE:
            if name == ROOT:
                return (ErrorCode.invalid_request,
                        "Removing the log level of the root logger is not allowed")
            checked.append((logger, logging.NOTSET))
            continue
        level = LEVELS.get((value or "").strip().upper())
        if level is None:
            return (ErrorCode.invalid_config,
                    f"Cannot set the log level of {name} to {value} as it is not a supported "
                    f"log level. Valid log4j levels are {', '.join(sorted(LEVELS))}")
        checked.append((logger, level))
    if not validate_only:
        for logger, level in checked:
            logger.setLevel(level)
    return ErrorCode.none, None
