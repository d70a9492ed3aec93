"""The broker epoch of the last clean shutdown (KIP-966), per log directory.

A broker that shuts down cleanly, after every partition log is flushed and
closed, writes ``.kafka_cleanshutdown`` at the top of each log directory:
``{"version":0,"brokerEpoch":N}``, as Kafka's ``CleanShutdownFileHandler``.
At the next start it reads the files and deletes them at once (so a crash
during recovery counts as unclean), and registers with that epoch as
``PreviousBrokerEpoch``. The controller compares it with the broker's last
registration: a mismatch (or -1) means the broker may have lost what its
page cache held, so it may not stay an eligible leader replica.

The epoch counts only if every directory has the file and they agree;
anything else (a missing, unreadable or odd file) is -1, unclean. Per
partition directories have their own marker of the same name (storage
recovery, `raftlog.storage.log`); this one sits one level up.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Final

from data_plane.storage_format import fsync_dir, write_durably

__all__ = ["CLEAN_SHUTDOWN_FILE", "take_previous_broker_epoch", "write_clean_shutdown"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"


def take_previous_broker_epoch(log_dirs: Sequence[str]) -> int:
    """The epoch of the last clean shutdown, or -1; removes the files."""
    epochs: set[int] = set()
    complete = True
    for directory in log_dirs:
        path = os.path.join(directory, CLEAN_SHUTDOWN_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            epoch = data["brokerEpoch"]
            if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
                raise ValueError(f"brokerEpoch {epoch!r}")
            epochs.add(epoch)
        except FileNotFoundError:
            complete = False
            continue
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s is unreadable (%s): treating the last shutdown as unclean",
                        path, exc)
            complete = False
        _remove(path, directory)
    if not complete or len(epochs) != 1:
        return -1
    return epochs.pop()


def write_clean_shutdown(log_dirs: Sequence[str], broker_epoch: int) -> None:
    """Record a clean shutdown at ``broker_epoch`` in every directory
    (written, fsynced, renamed into place, directory fsynced). An error is
    logged: the next start then counts as unclean, which is safe."""
    body = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")).encode()
    for directory in log_dirs:
        try:
            write_durably(directory, CLEAN_SHUTDOWN_FILE, body)
        except OSError as exc:
            log.error("cannot write %s in %s: %s (the next start counts as unclean)",
                      CLEAN_SHUTDOWN_FILE, directory, exc)


def _remove(path: str, directory: str) -> None:
    try:
        os.remove(path)
        fsync_dir(directory)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("cannot remove %s: %s", path, exc)
