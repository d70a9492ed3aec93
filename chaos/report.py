"""Per-run report: ``results.json``, two PNG plots and an ``index.html``.

The plots follow Jepsen's ``latency-raw.png`` and ``rate.png``
(``jepsen.checker.perf``): one point per completed client op at (invoke time,
latency) on a log scale, coloured by ok / fail / info and shaped by ``f``;
and completions per second per ``f`` and type. Nemesis windows (from each
``start-x`` to the next ``stop-x``) are shaded in both. Uses matplotlib's Agg
backend (no display); matplotlib is an optional dependency of chaos.
"""

from __future__ import annotations

import html
import json
import os
from collections import defaultdict
from pathlib import Path

from chaos.checker.base import Result
from chaos.history import JSON, NEMESIS, History, OpType, pairs

COLORS = {OpType.OK: "#2a9d3a", OpType.FAIL: "#d62728", OpType.INFO: "#ff9f1c"}
MARKERS = ["o", "^", "s", "D", "v", "P"]
FAULT_COLORS = ["#9ecae1", "#fdae6b", "#c7e9c0", "#dadaeb", "#fcbba1", "#d9d9d9"]


def fault_windows(history: History) -> list[tuple[str, float, float]]:
    """``(fault, start_s, end_s)`` per nemesis window; open windows end at the end."""
    end = history[-1].time_ns / 1e9 if len(history) else 0.0
    open_: dict[str, float] = {}
    out: list[tuple[str, float, float]] = []
    for op in history:
        if op.process != NEMESIS or op.type is not OpType.INVOKE:
            continue
        action, _, kind = op.f.partition("-")
        if action == "start":
            open_.setdefault(kind, op.time_ns / 1e9)
        elif action == "stop" and kind in open_:
            out.append((kind, open_.pop(kind), op.time_ns / 1e9))
    out += [(k, t, end) for k, t in open_.items()]
    return sorted(out, key=lambda w: w[1])


def _shade(ax: object, windows: list[tuple[str, float, float]]) -> None:
    kinds = sorted({w[0] for w in windows})
    seen: set[str] = set()
    for kind, t0, t1 in windows:
        color = FAULT_COLORS[kinds.index(kind) % len(FAULT_COLORS)]
        label = None if kind in seen else kind
        seen.add(kind)
        ax.axvspan(t0, t1, color=color, alpha=0.35, lw=0, label=label)  # type: ignore[attr-defined]


def plot(history: History, out_dir: Path) -> list[str]:
    """Write ``latency-raw.png`` and ``rate.png``; return their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ps = [p for p in pairs(history.client_ops()) if p.complete is not None]
    fs = sorted({p.invoke.f for p in ps})
    windows = fault_windows(history)

    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    _shade(ax, windows)
    for i, f in enumerate(fs):
        for t in (OpType.OK, OpType.INFO, OpType.FAIL):
            pts = [
                (p.invoke.time_ns / 1e9, max(p.latency_ns or 0, 1) / 1e6)
                for p in ps
                if p.invoke.f == f and p.type is t
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.scatter(
                    xs,
                    ys,
                    s=9,
                    marker=MARKERS[i % len(MARKERS)],
                    color=COLORS[t],
                    alpha=0.7,
                    label=f"{f} {t.value}",
                    linewidths=0,
                )
    ax.set_yscale("log")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("latency (raw)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "latency-raw.png")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    _shade(ax, windows)
    buckets: dict[tuple[str, OpType], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    span = int(history[-1].time_ns / 1e9) + 1 if len(history) else 1
    for p in ps:
        assert p.complete is not None
        buckets[(p.invoke.f, p.type)][int(p.complete.time_ns / 1e9)] += 1
    for i, f in enumerate(fs):
        for t in (OpType.OK, OpType.INFO, OpType.FAIL):
            b = buckets.get((f, t))
            if b:
                secs = list(range(span))
                ax.plot(
                    secs,
                    [b.get(x, 0) for x in secs],
                    color=COLORS[t],
                    marker=MARKERS[i % len(MARKERS)],
                    markersize=3,
                    lw=1,
                    label=f"{f} {t.value}",
                )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (ops/s)")
    ax.set_title("rate")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "rate.png")
    plt.close(fig)
    return ["latency-raw.png", "rate.png"]


def _css(valid: object) -> str:
    return "ok" if valid is True else "bad" if valid is False else "unknown"


def _verdict_html(name: str, r: Result, depth: int = 0) -> str:
    cls = _css(r.valid)
    parts = [
        f'<h{3 + min(depth, 2)} class="{cls}">{html.escape(name)}: valid = {html.escape(str(r.valid))}</h{3 + min(depth, 2)}>'
    ]
    if r.reason:
        parts.append(f"<p><i>{html.escape(r.reason)}</i></p>")
    for kind, found in r.anomalies.items():
        parts.append(f"<h5>{html.escape(kind)}: {len(found)}</h5><ul>")
        for a in found[:8]:
            ops = "\n".join(json.dumps(op.to_json()) for op in a.ops)
            parts.append(
                f"<li>{html.escape(a.description)} <code>{html.escape(json.dumps(dict(a.details)))}</code><pre>{html.escape(ops)}</pre></li>"
            )
        parts.append("</ul>")
    for child_name, child in r.children.items():
        parts.append(_verdict_html(child_name, child, depth + 1))
    return "\n".join(parts)


def write_report(
    history: History,
    result: Result,
    out_dir: str | os.PathLike[str],
    *,
    meta: dict[str, JSON] | None = None,
) -> Path:
    """Write ``results.json``, the plots and ``index.html`` into ``out_dir``.

    Returns the HTML path. ``results.json`` is ``{"valid", "meta", "results",
    "faults"}``; ``valid`` is the composed verdict (True, False or "unknown").
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    windows = fault_windows(history)
    doc = {
        "valid": result.valid,
        "meta": meta or {},
        "results": result.to_json(),
        "faults": [{"fault": k, "start_s": a, "end_s": b} for k, a, b in windows],
    }
    (out / "results.json").write_text(json.dumps(doc, indent=2, default=str))
    images = plot(history, out)
    body = "\n".join(
        [
            "<!doctype html><meta charset=utf-8><title>raftlog chaos run</title>",
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}.ok{color:#2a9d3a}.bad{color:#d62728}"
            ".unknown{color:#e08e0b}pre{background:#f6f6f6;padding:4px;font-size:11px;overflow-x:auto}</style>",
            f'<h1 class="{_css(result.valid)}">raftlog chaos run: valid = {html.escape(str(result.valid))}</h1>',
            f"<pre>{html.escape(json.dumps(meta or {}, indent=1, default=str))}</pre>",
            *[f'<img src="{img}" alt="{img}" style="max-width:100%">' for img in images],
            "<h2>Checkers</h2>",
            _verdict_html("all", result),
            '<p><a href="results.json">results.json</a></p>',
        ]
    )
    path = out / "index.html"
    path.write_text(body)
    return path
