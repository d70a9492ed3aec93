"""The `raftlog` command line.

Subcommands that exist today:

- ``raftlog demo``: append record batches to a segment log, close it,
  reopen it (recovery), read everything back and print what was found;
- ``raftlog dump-log FILE...``: print the batches and records of segment
  files, like Kafka's ``kafka-dump-log.sh --files ... --print-data-log``.

- ``raftlog server start``, ``storage format|random-uuid``, ``quorum
  describe``, ``topics create|list|describe|delete``, ``metadata dump``: see
  `data_plane.admin_cli`.

The cluster, produce/consume, groups and chaos subcommands arrive with their
issues (see ARCHITECTURE.md, "CLI").

Errors in what the user typed or in the files named are reported as one
readable line on stderr with exit code 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import tempfile
import time
from collections.abc import Collection, Sequence

from data_plane.admin_cli import CliError, register
from raftlog.clock import SystemClock
from raftlog.records import (
    BatchBuilder,
    Compression,
    RecordError,
    decode_records,
    iter_batches,
    parse_control_record_key,
)
from raftlog.storage.config import LogConfig
from raftlog.storage.files import RealFileSystem
from raftlog.storage.log import Log


def _compression(name: str) -> Compression:
    try:
        return Compression[name.upper()]
    except KeyError:
        choices = ", ".join(c.name.lower() for c in Compression)
        raise argparse.ArgumentTypeError(f"unknown compression {name!r} (choose from {choices})") from None


def cmd_demo(args: argparse.Namespace) -> int:
    """Append, close, reopen (recovering), read back, and report."""
    directory = args.dir or tempfile.mkdtemp(prefix="raftlog-demo-")
    os.makedirs(directory, exist_ok=True)
    clock = SystemClock()
    config = LogConfig(segment_bytes=args.segment_bytes)
    fs = RealFileSystem()
    print(f"log directory: {directory}")

    log = Log.open(directory, config, fs=fs, clock=clock)
    start = log.log_end_offset
    rng = random.Random(args.seed)
    started = time.perf_counter()
    for batch_no in range(args.batches):
        builder = BatchBuilder(compression=args.compression)
        now = clock.wall_ms()
        for i in range(args.records_per_batch):
            builder.append(rng.randbytes(args.record_bytes), key=f"key-{batch_no}-{i}".encode(), timestamp_ms=now)
        log.append_as_leader(builder.build(), leader_epoch=0, now_ms=now)
    flushed = log.flush()
    elapsed = time.perf_counter() - started
    appended = log.log_end_offset - start
    print(f"appended {appended} records in {args.batches} batches "
          f"({args.compression.name.lower()}), fsynced up to offset {flushed} "
          f"in {elapsed * 1000:.1f} ms")
    if args.torn_tail:
        # Leave the log as a crash mid-write would: no clean-shutdown marker,
        # and half of a batch after the last whole one.
        tail = log.active_segment.path(".log")
        del log  # dropped without close(): no clean-shutdown marker is written
        with open(tail, "ab") as f:
            f.write(builder.build()[: args.record_bytes // 2])
        print(f"simulated a crash: {args.record_bytes // 2} bytes of a torn batch left in {os.path.basename(tail)}")
    else:
        log.close()

    reopened = Log.open(directory, config, fs=fs, clock=clock)
    how = ("clean shutdown marker found, no rescan" if reopened.opened_cleanly
           else f"recovered by scanning {reopened.recovered_segment_count} segment(s)")
    print(f"reopened: offsets [{reopened.log_start_offset}, {reopened.log_end_offset}), {how}, "
          f"{len(reopened.segments)} segment(s), {reopened.size_in_bytes} bytes")

    offset, seen, batches = start, 0, 0
    while offset < reopened.log_end_offset:
        data = reopened.read(offset, max_bytes=1 << 20).records
        for header, pos in iter_batches(data):
            for record in decode_records(data[pos:pos + header.size_in_bytes]):
                if record.offset >= offset:
                    seen += 1
            batches += 1
            offset = header.next_offset
    reopened.close()
    ok = seen == appended
    print(f"read back {seen} records in {batches} batches: {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def cmd_dump_log(args: argparse.Namespace) -> int:
    """Print each batch (and with --print-data-log each record) of segment
    files; --offsets-decoder and --transaction-log-decoder print the
    records of the coordinators' topics decoded (`data_plane.dump_decoders`)."""
    decoder = None
    if args.offsets_decoder or args.transaction_log_decoder:
        from data_plane.dump_decoders import DECODERS

        decoder = DECODERS["offsets" if args.offsets_decoder else "transaction-log"]
    for path in args.files:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror}") from None
        print(f"Dumping {path}")
        end = 0
        try:
            for h, pos in iter_batches(data):
                end = pos + h.size_in_bytes
                print(f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                      f"baseSequence: {h.base_sequence} partitionLeaderEpoch: {h.partition_leader_epoch} "
                      f"isTransactional: {str(h.is_transactional).lower()} "
                      f"isControl: {str(h.is_control).lower()} producerId: {h.producer_id} "
                      f"producerEpoch: {h.producer_epoch} position: {pos} "
                      f"CreateTime: {h.max_timestamp} size: {h.size_in_bytes} "
                      f"compresscodec: {h.compression.name.lower()} crc: {h.crc} isvalid: true")
                if args.print_data_log or decoder is not None:
                    for r in decode_records(data[pos:end]):
                        if h.is_control and r.key is not None:
                            _, kind = parse_control_record_key(r.key)
                            print(f"| offset: {r.offset} CreateTime: {r.timestamp} endTxnMarker/control: {kind.name}")
                            continue
                        if decoder is not None:
                            print(f"| offset: {r.offset} CreateTime: {r.timestamp} "
                                  f"keySize: {len(r.key or b'')} valueSize: {len(r.value or b'')} "
                                  f"{decoder(r.key, r.value)}")
                            continue
                        key = r.key.decode("utf-8", "backslashreplace") if r.key is not None else "null"
                        val = r.value.decode("utf-8", "backslashreplace") if r.value is not None else "null"
                        headers = ",".join(f"{hd.key}:{hd.value!r}" for hd in r.headers)
                        print(f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: {len(r.key or b'')} "
                              f"valueSize: {len(r.value or b'')} headerKeys: [{headers}] key: {key} payload: {val}")
        except RecordError as exc:
            print(f"Found invalid batch at position {end}: {exc}")
            continue
        if end < len(data):
            print(f"Found {len(data) - end} bytes of a partial batch at position {end}")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `raftlog` parser: every command, or with ``command`` (the one a
    command line names) only the commands of its own modules, so a call
    imports what it runs (`data_plane.admin_cli.register`). A name no
    command has gets the full parser, whose error lists them all."""
    if command is not None:
        parser, commands = _build_parser(command)
        if command in commands:
            return parser
    return _build_parser(None)[0]


def _build_parser(only: str | None) -> tuple[argparse.ArgumentParser, Collection[str]]:
    parser = argparse.ArgumentParser(prog="raftlog", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="append to a segment log, reopen it, read it back")
    demo.add_argument("--dir", help="log directory (default: a new temporary directory)")
    demo.add_argument("--batches", type=int, default=200)
    demo.add_argument("--records-per-batch", type=int, default=64)
    demo.add_argument("--record-bytes", type=int, default=1024)
    demo.add_argument("--segment-bytes", type=int, default=4 * 1024 * 1024,
                      help="segment.bytes (small, so the demo rolls segments)")
    demo.add_argument("--compression", type=_compression, default=Compression.ZSTD)
    demo.add_argument("--seed", type=int, default=1, help="seed of the random record values")
    demo.add_argument("--torn-tail", action="store_true",
                      help="end as a crash would (no clean shutdown, a torn batch), to show recovery")
    demo.set_defaults(func=cmd_demo)

    dump = sub.add_parser("dump-log", help="print the batches of segment files (kafka-dump-log.sh)")
    dump.add_argument("files", nargs="+", metavar="FILE")
    dump.add_argument("--print-data-log", action="store_true", help="also print every record")
    decoders = dump.add_mutually_exclusive_group()
    decoders.add_argument("--offsets-decoder", action="store_true",
                          help="__consumer_offsets records, decoded as JSON (implies "
                               "--print-data-log)")
    decoders.add_argument("--transaction-log-decoder", action="store_true",
                          help="__transaction_state records, decoded as JSON (implies "
                               "--print-data-log)")
    dump.set_defaults(func=cmd_dump_log)
    chaos = sub.add_parser("chaos", help="chaos test runs (chaos/: run, soak)", add_help=False)
    chaos.add_argument("chaos_args", nargs=argparse.REMAINDER)
    chaos.set_defaults(func=cmd_chaos)
    register(sub, only)
    return parser, sub.choices


def cmd_chaos(args: argparse.Namespace) -> int:
    """Run the chaos suite's CLI, found as the ``chaos`` plugin of the
    ``raftlog.commands`` entry-point group (pyproject.toml). data_plane sits
    below chaos/ in the layering (ARCHITECTURE.md), so it never imports it:
    the suite registers itself, as pytest plugins do."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="raftlog.commands") if ep.name == "chaos"]
    if not found:
        raise CliError("the chaos suite is not installed (no 'chaos' entry in raftlog.commands)")
    chaos_main = found[0].load()
    return int(chaos_main(args.chaos_args))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    if argv[:1] == ["chaos"]:
        # Everything after `chaos` is the chaos CLI's, options included
        # (argparse's REMAINDER would refuse a leading `-h`).
        args = argparse.Namespace(func=cmd_chaos, chaos_args=argv[1:])
    else:
        args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # A refused login is the command's error line (CliError); the client's own
    # warning, meant for a broker's log, would say it twice.
    logging.getLogger("raftlog.net.client").setLevel(logging.ERROR)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"raftlog: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `raftlog dump-log ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
