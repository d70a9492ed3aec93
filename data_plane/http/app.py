"""The node's aiohttp application and server (``http.listener``).

Routes:

- ``/v3/...``: the REST API (`data_plane.http.rest`);
- ``/openapi.json``: its OpenAPI 3.0 document (`data_plane.http.openapi`);
- ``/metrics``: Prometheus text (`data_plane.http.metrics`);
- ``/healthz``: 200 while the node serves;
- ``/ui``: the dashboard (static files in ``static/``) and
  ``/ui/api/status``, the one JSON document it polls (`status`).

Every error, including aiohttp's own (404 route, 405 method, 413 body too
large), is answered as ``{"error_code", "message"}`` by `_errors`.
Request bodies are capped at ``max_body_bytes`` (default 1 MiB).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .backend import ClusterBackend, QuorumView, RestError
from .metrics import NodeMetrics
from .openapi import openapi_document
from .rest import BACKEND, add_routes

__all__ = ("METRICS", "HttpServer", "build_app", "status")

log = logging.getLogger("raftlog.http")

METRICS: Final = web.AppKey("metrics", NodeMetrics)
MAX_BODY_BYTES: Final = web.AppKey("max_body_bytes", int)
# The broker's (name, Kafka BrokerState code), when the node is a broker.
BROKER_STATE: Final[web.AppKey[Callable[[], tuple[str, int]]]] = web.AppKey("broker_state")
STATIC_DIR: Final = Path(__file__).with_name("static")
DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RestError as exc:
        return web.json_response({"error_code": exc.error_code, "message": exc.message},
                                 status=exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason
        if exc.status == 413:
            message = f"body: larger than {request.app[MAX_BODY_BYTES]} bytes"
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        return web.json_response({"error_code": exc.status, "message": message},
                                 status=exc.status, headers=headers)
    except Exception:
        log.exception("HTTP %s %s failed", request.method, request.path)
        return web.json_response({"error_code": 500, "message": "internal error"}, status=500)


def build_app(backend: ClusterBackend, metrics: NodeMetrics | None = None, *,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
              broker_state: Callable[[], tuple[str, int]] | None = None) -> web.Application:
    """The whole HTTP surface of one node over ``backend`` (and ``metrics``,
    if any; ``broker_state``: the broker's own state for ``/healthz``)."""
    app = web.Application(middlewares=[_errors], client_max_size=max_body_bytes)
    app[BACKEND] = backend
    app[MAX_BODY_BYTES] = max_body_bytes
    if broker_state is not None:
        app[BROKER_STATE] = broker_state
    if metrics is not None:
        app[METRICS] = metrics
    add_routes(app)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_text)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/ui/api/status", ui_status)
    app.router.add_get("/ui", ui_index)
    app.router.add_get("/ui/", ui_index)
    app.router.add_static("/ui/static", STATIC_DIR, show_index=False)
    app.router.add_get("/", _to_ui)
    return app


async def _to_ui(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


async def healthz(request: web.Request) -> web.Response:
    """Liveness (always 200 while the process serves) and, on a broker, its
    own lifecycle state: ``running`` once this process registered and the
    controller unfenced it. The controller's view can lag: after an
    unclean restart it still lists the previous process's registration as
    unfenced until that session expires, while this one is still ``starting``."""
    backend = request.app[BACKEND]
    body: dict[str, object] = {"status": "ok", "node_id": backend.node_id,
                               "cluster_id": backend.cluster_id}
    broker_state = request.app.get(BROKER_STATE)
    if broker_state is not None:
        body["broker_state"] = broker_state()[0]
    return web.json_response(body)


async def metrics_text(request: web.Request) -> web.Response:
    metrics = request.app.get(METRICS)
    if metrics is None:
        raise RestError(404, 40400, "metrics are not enabled on this server")
    body = generate_latest(metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


async def ui_index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


async def ui_status(request: web.Request) -> web.Response:
    return web.json_response(await status(request.app[BACKEND], request.app.get(METRICS)),
                             dumps=lambda obj: json.dumps(obj, separators=(",", ":")))


async def status(backend: ClusterBackend, metrics: NodeMetrics | None) -> dict[str, Any]:
    """The dashboard's document: cluster, brokers, quorum, topics with their
    partitions (and each partition's end offset, for throughput) and this
    node's byte counters. Parts that cannot be read now carry an ``error``."""
    image = backend.image()
    quorum: dict[str, Any]
    try:
        quorum = _quorum_json(await backend.quorum())
    except RestError as exc:
        quorum = {"error": exc.message}
    keys = [(t.name, i) for t in image.topics.values() for i in t.partitions]
    try:
        ends = await backend.end_offsets(keys)
    except RestError:
        ends = {}
    topics = []
    for topic in sorted(image.topics.values(), key=lambda t: t.name):
        partitions = []
        for index, p in sorted(topic.partitions.items()):
            partitions.append({
                "partition_id": index, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas), "isr": list(p.isr), "elr": list(p.elr),
                "last_known_elr": list(p.last_known_elr),
                "under_replicated": len(p.isr) < len(p.replicas), "offline": p.leader < 0,
                "end_offset": ends.get((topic.name, index)),
            })
        topics.append({"topic_name": topic.name, "topic_id": str(topic.topic_id),
                       "partitions": partitions})
    brokers = [
        {"broker_id": b.broker_id, "fenced": b.fenced,
         "in_controlled_shutdown": b.in_controlled_shutdown, "rack": b.rack,
         "endpoints": [f"{e.name}://{e.host}:{e.port}" for e in b.listeners]}
        for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
    ]
    return {
        "time_ms": int(time.time() * 1000),
        "cluster_id": backend.cluster_id,
        "node_id": backend.node_id,
        "metadata_offset": image.provenance.last_offset,
        "brokers": brokers,
        "quorum": quorum,
        "topics": topics,
        "node_counters": _counters(metrics),
    }


def _quorum_json(view: QuorumView) -> dict[str, Any]:
    def replica(r: Any) -> dict[str, Any]:
        return {"replica_id": r.replica_id, "log_end_offset": r.log_end_offset, "lag": r.lag,
                "last_fetch_timestamp": r.last_fetch_timestamp_ms,
                "last_caught_up_timestamp": r.last_caught_up_timestamp_ms}

    return {"leader_id": view.leader_id, "epoch": view.epoch,
            "high_watermark": view.high_watermark,
            "voters": [replica(v) for v in view.voters],
            "observers": [replica(o) for o in view.observers]}


def _counters(metrics: NodeMetrics | None) -> dict[str, float]:
    """This node's totals of the per-topic byte/record counters (the page takes rates)."""
    if metrics is None:
        return {}
    counters = {"bytesin": metrics.bytes_in, "bytesout": metrics.bytes_out,
                "messagesin": metrics.messages_in,
                "replicationbytesout": metrics.replication_bytes_out}
    totals: dict[str, float] = {}
    for name, counter in counters.items():
        totals[name] = sum(sample.value for family in counter.collect()
                           for sample in family.samples if sample.name.endswith("_total"))
    return totals


class HttpServer:
    """``build_app`` served on ``host:port`` (aiohttp's AppRunner + TCPSite)."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            server = site._server  # the bound port of an ephemeral listener
            sockets = getattr(server, "sockets", None) or ()
            for sock in sockets:
                self.port = sock.getsockname()[1]
                break

    async def stop(self) -> None:
        await self._runner.cleanup()
