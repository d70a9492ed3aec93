"""``raftlog features``: kafka-features.sh (KIP-584) over the Kafka protocol.

- ``describe``: one line per feature the node's software supports, as
  Kafka's tool prints it (``Feature: NAME\\tSupportedMinVersion: ...
  \\tSupportedMaxVersion: ...\\tFinalizedVersionLevel: ...\\tEpoch: ...``),
  from an ApiVersions v4 answer (a broker's, or a controller's with
  ``--bootstrap-controller``);
- ``upgrade --feature NAME=LEVEL``, ``downgrade --feature NAME=LEVEL
  [--unsafe]`` and ``disable --feature NAME [--unsafe]`` (level 0):
  UpdateFeatures, with ``--dry-run`` to validate only. One line per
  feature (``NAME was upgraded to L.``, or ``Could not ...`` and the
  controller's reason); exit 1 if any failed.

There is no ``--metadata``: raftlog has no ``metadata.version``.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Sequence
from typing import Any, Final

from kio.schema.api_versions.v4 import request as av_req
from kio.schema.api_versions.v4 import response as av_resp
from kio.schema.update_features.v1 import request as uf_req
from kio.schema.update_features.v1 import response as uf_resp
from kio.static.primitive import i8, i16, i32Timedelta

from data_plane.admin_cli import CliError, _Admin, _admin_options, _error_name, _run_admin
from metadata_quorum.controller.feature_control import UpgradeType
from raftlog.net.errors import ErrorCode

__all__ = ("format_features", "parse_feature_level", "register_features")

_API_VERSIONS_KEY: Final = 18
#: Answers another node, or a later try, may not give.
_RETRIABLE: Final = frozenset({ErrorCode.not_controller, ErrorCode.request_timed_out})


def parse_feature_level(text: str) -> tuple[str, int]:
    """``NAME=LEVEL`` (kafka-features.sh's form); a readable `CliError` otherwise."""
    name, sep, level = text.partition("=")
    name, level = name.strip(), level.strip()
    if not sep:
        raise CliError(f"Can't parse feature=level string {text}: equals sign not found.")
    if not name:
        raise CliError(f"Can't parse feature=level string {text}: no feature name.")
    try:
        value = int(level)
    except ValueError:
        raise CliError(f"Can't parse feature=level string {text}: unable to parse {level} "
                       "as a short.") from None
    if not -(2**15) <= value < 2**15:
        raise CliError(f"Can't parse feature=level string {text}: unable to parse {level} "
                       "as a short.")
    return name, value


def format_features(response: Any) -> list[str]:
    """``describe`` lines from an ApiVersions v3+ answer, sorted by name."""
    finalized = {str(f.name): int(f.max_version_level) for f in response.finalized_features}
    epoch = int(response.finalized_features_epoch)
    epoch_text = str(epoch) if epoch >= 0 else "-"
    return [
        f"Feature: {f.name}\tSupportedMinVersion: {int(f.min_version)}"
        f"\tSupportedMaxVersion: {int(f.max_version)}"
        f"\tFinalizedVersionLevel: {finalized.get(str(f.name), 0)}\tEpoch: {epoch_text}"
        for f in sorted(response.supported_features, key=lambda f: str(f.name))
    ]


def cmd_features_describe(args: argparse.Namespace) -> int:
    async def body(admin: _Admin) -> int:
        response = await admin.first(
            av_req.ApiVersionsRequest(client_software_name="raftlog-features",
                                      client_software_version="1"),
            4, lambda r: None if r.error_code == ErrorCode.none else _error_name(r.error_code))
        assert isinstance(response, av_resp.ApiVersionsResponse)
        lines = format_features(response)
        print("\n".join(lines) if lines else "No features are supported.")
        return 0

    return _run_admin(args, body)


def _updates(args: argparse.Namespace) -> list[tuple[str, int]]:
    if not args.feature:
        raise CliError(f"You must specify at least one feature to {args.action}")
    if args.action == "disable":
        pairs = [(name.strip(), 0) for name in args.feature]
    else:
        pairs = [parse_feature_level(text) for text in args.feature]
    seen: set[str] = set()
    for name, _level in pairs:
        if name in seen:
            raise CliError(f"Feature {name} was specified more than once.")
        seen.add(name)
    return pairs


def _upgrade_type(args: argparse.Namespace) -> UpgradeType:
    if args.action == "upgrade":
        return UpgradeType.UPGRADE
    return UpgradeType.UNSAFE_DOWNGRADE if args.unsafe else UpgradeType.SAFE_DOWNGRADE


def outcome_lines(action: str, updates: Sequence[tuple[str, int]], dry_run: bool,
                  error: int, message: str | None) -> list[str]:
    """kafka-features.sh's line per feature, sorted by name."""
    lines = []
    for name, level in sorted(updates):
        what = f"disable {name}" if action == "disable" else f"{action} {name} to {level}"
        if error != ErrorCode.none:
            reason = message or _error_name(error)
            lines.append(f"{'Can not' if dry_run else 'Could not'} {what}. {reason}")
        else:
            done = "disabled." if action == "disable" else f"{action}d to {level}."
            lines.append(f"{name}{' can be ' if dry_run else ' was '}{done}")
    return lines


def cmd_features_update(args: argparse.Namespace) -> int:
    updates = _updates(args)
    upgrade_type = _upgrade_type(args)
    request = uf_req.UpdateFeaturesRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=args.timeout_ms)),
        feature_updates=tuple(
            uf_req.FeatureUpdateKey(feature=name, max_version_level=i16(level),
                                    upgrade_type=i8(int(upgrade_type)))
            for name, level in updates),
        validate_only=bool(args.dry_run))

    async def body(admin: _Admin) -> int:
        response = await admin.first(
            request, 1, lambda r: _error_name(r.error_code) if r.error_code in _RETRIABLE
            else None)
        assert isinstance(response, uf_resp.UpdateFeaturesResponse)
        print("\n".join(outcome_lines(args.action, updates, bool(args.dry_run),
                                      int(response.error_code), response.error_message)))
        if response.error_code != ErrorCode.none:
            raise CliError(f"{len(updates)} out of {len(updates)} operation(s) failed.")
        return 0

    return _run_admin(args, body)


def register_features(sub: Any) -> None:
    """Add ``features`` to the `raftlog` subparsers ``sub``."""
    parser = sub.add_parser("features",
                            help="describe and change feature levels (kafka-features.sh)")
    actions = parser.add_subparsers(dest="action", required=True)
    describe = actions.add_parser("describe", help="the supported and finalized feature levels")
    _admin_options(describe, broker=True)
    describe.set_defaults(func=cmd_features_describe)
    for name, text in (("upgrade", "raise feature levels"),
                       ("downgrade", "lower feature levels"),
                       ("disable", "set feature levels to 0")):
        action = actions.add_parser(name, help=text)
        action.add_argument(
            "--feature", action="append", metavar="NAME" if name == "disable" else "NAME=LEVEL",
            help="e.g. " + ("eligible.leader.replicas.version" if name == "disable"
                            else "eligible.leader.replicas.version=1") + "; repeatable")
        if name != "upgrade":
            action.add_argument("--unsafe", action="store_true",
                                help="an unsafe (lossy) downgrade")
        action.add_argument("--dry-run", action="store_true",
                            help="validate the change, but do not make it")
        _admin_options(action, broker=True)
        action.set_defaults(func=cmd_features_update)
