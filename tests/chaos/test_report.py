from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from chaos.checker import compose, kafka_checkers
from chaos.history import NEMESIS, History, Op, OpType
from chaos.report import fault_windows, write_report

pytest.importorskip("matplotlib")


def synthetic(seed: int = 1) -> History:
    """30 s of sends/polls; a kill 10-15 s (info + slow), one lost write."""
    rng = random.Random(seed)
    ops: list[Op] = []

    def add(t: float, ty: OpType, p: object, f: str, v: object) -> None:
        ops.append(Op(len(ops), int(t * 1e9), ty, p, f, v))  # type: ignore[arg-type]

    offset = 0
    log: list[tuple[int, int]] = []
    add(10, OpType.INVOKE, NEMESIS, "start-kill", {"target": "leader"})
    add(10.01, OpType.INFO, NEMESIS, "start-kill", {"nodes": ["n1"]})
    add(15, OpType.INVOKE, NEMESIS, "stop-kill", None)
    add(15.01, OpType.INFO, NEMESIS, "stop-kill", {"nodes": ["n1"]})
    events = []
    for i in range(600):
        t = i * 0.05
        faulty = 10 <= t < 15
        events.append((t, i, faulty))
    body: list[tuple[float, OpType, object, str, object]] = []
    for t, i, faulty in events:
        lat = rng.uniform(2, 3 if faulty else 0.01) if faulty else rng.lognormvariate(-5, 0.5)
        if i % 3:
            body.append((t, OpType.INVOKE, i % 4, "send", {"partition": 0, "value": i}))
            if faulty and rng.random() < 0.5:
                body.append((t + lat, OpType.INFO, i % 4, "send", {"partition": 0, "value": i}))
            else:
                body.append(
                    (
                        t + lat,
                        OpType.OK,
                        i % 4,
                        "send",
                        {"partition": 0, "value": i, "offset": offset},
                    )
                )
                if i != 301:  # lost
                    log.append((offset, i))
                offset += 1
        else:
            body.append((t, OpType.INVOKE, i % 4, "poll", None))
            body.append((t + lat, OpType.OK, i % 4, "poll", {"records": {"0": []}}))
    # one process per op pair keeps every process single-threaded
    merged = sorted(
        ((t, ty, 100 + n // 2, f, v) for n, (t, ty, _p, f, v) in enumerate(body)),
        key=lambda r: r[0],
    )
    for t, ty, p, f, v in merged:
        add(t, ty, p, f, v)
    ops.sort(key=lambda o: o.time_ns)
    ops = [Op(i, o.time_ns, o.type, o.process, o.f, o.value) for i, o in enumerate(ops)]
    end = ops[-1].time_ns / 1e9 + 1
    ops.append(Op(len(ops), int(end * 1e9), OpType.INVOKE, 999, "final-read", None))
    ops.append(
        Op(
            len(ops),
            int((end + 0.1) * 1e9),
            OpType.OK,
            999,
            "final-read",
            {"records": {"0": [list(r) for r in log]}, "end_offsets": {"0": offset}},
        )
    )
    return History(ops)


def test_report_renders_plots_json_and_verdicts(tmp_path: Path) -> None:
    h = synthetic()
    assert fault_windows(h) == [("kill", 10.0, 15.0)]
    result = compose(kafka_checkers()).check(h)
    assert result.valid is False  # the lost send of value 301
    path = write_report(h, result, tmp_path, meta={"seed": 1, "nemesis": ["kill"]})
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["valid"] is False
    assert doc["faults"] == [{"fault": "kill", "start_s": 10.0, "end_s": 15.0}]
    assert doc["results"]["checkers"]["lost-writes"]["anomaly_counts"] == {"lost-write": 1}
    page = path.read_text()
    assert (
        "lost-write: 1" in page and "latency-raw.png" in page and "&quot;value&quot;: 301" in page
    )
    for png in ("latency-raw.png", "rate.png"):
        data = (tmp_path / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
