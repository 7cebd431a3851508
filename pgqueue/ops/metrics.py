"""Prometheus metrics of one worker: `pgqueue worker --metrics-port N`, or
`app.worker(metrics_port=N)`. Needs the optional extra: pip install 'pgqueue-jobs[metrics]'.

Counters and histograms are this worker's own (Prometheus sums them across workers);
the queue depth gauges are read from the database, so every worker reports the same
cluster-wide values for the queues it serves (use max() or one worker's series).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from pgqueue.errors import ConfigError
from pgqueue.states import RunState

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer


class Answer(Protocol):
    """A probe's answer (pgqueue.worker.probes.Probe)."""

    status: int
    body: dict[str, Any]


class Probes(Protocol):
    """What answers the worker's probe paths (pgqueue.worker.probes.Probes)."""

    def answer(self, path: str) -> Answer | None: ...


# A WSGI application: (environ, start_response) -> body chunks.
Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

log = logging.getLogger("pgqueue.worker")

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
DEPTH_STATES = (RunState.QUEUED, RunState.SCHEDULED, RunState.RUNNING, RunState.WAITING)


class WorkerMetrics:
    """The metrics of one worker, in a registry of their own."""

    def __init__(self) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            raise ConfigError(
                "metrics need prometheus-client: pip install 'pgqueue-jobs[metrics]'"
            ) from None
        self.registry = prom.CollectorRegistry()
        by_task = ["queue", "task"]
        r = self.registry
        self.started = prom.Counter(
            "pgqueue_runs_started", "Attempts this worker started.", by_task, registry=r
        )
        self.succeeded = prom.Counter(
            "pgqueue_runs_succeeded", "Runs that succeeded.", by_task, registry=r
        )
        self.failed = prom.Counter(
            "pgqueue_runs_failed", "Runs that failed for good.", by_task, registry=r
        )
        self.retried = prom.Counter(
            "pgqueue_runs_retried",
            "Failed attempts scheduled for another attempt.",
            by_task,
            registry=r,
        )
        self.duration = prom.Histogram(
            "pgqueue_run_duration_seconds",
            "Wall time of one attempt, from claim to its recorded outcome.",
            by_task,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.pickup = prom.Histogram(
            "pgqueue_pickup_latency_seconds",
            "Time from a run becoming due to a worker claiming it.",
            ["queue"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.depth = prom.Gauge(
            "pgqueue_queue_depth",
            "Runs of a queue by state, cluster-wide (read from the database).",
            ["queue", "state"],
            registry=r,
        )
        self.oldest = prom.Gauge(
            "pgqueue_oldest_queued_seconds",
            "Age of the oldest queued run of a queue (0 when none is queued).",
            ["queue"],
            registry=r,
        )
        self._server: WSGIServer | None = None

    def serve(self, port: int, addr: str = "0.0.0.0", probes: Probes | None = None) -> int:
        """Serve /metrics (and, given `probes`, /healthz and /healthz/ready) on a daemon
        thread; returns the port (useful with port 0)."""
        import prometheus_client as prom

        app: Wsgi = prom.make_wsgi_app(self.registry)
        if probes is not None:
            app = _with_probes(app, probes)
        try:
            self._server = _server(addr, port, app)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {addr}:{port}: {exc}") from None
        threading.Thread(
            target=self._server.serve_forever, name="pgqueue-metrics", daemon=True
        ).start()
        bound = int(self._server.server_port)
        log.info("metrics on http://%s:%d/metrics", addr, bound)
        return bound

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def set_depth(self, rows: list[tuple[Any, ...]]) -> None:
        for queue, queued, scheduled, running, waiting, oldest in rows:
            for state, value in zip(
                DEPTH_STATES, (queued, scheduled, running, waiting), strict=True
            ):
                self.depth.labels(queue, state).set(value)
            self.oldest.labels(queue).set(oldest or 0.0)


def _with_probes(metrics: Wsgi, probes: Probes) -> Wsgi:
    """`metrics`, with the worker's probes answering at their paths."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        probe = probes.answer(environ.get("PATH_INFO", ""))
        if probe is None:
            return metrics(environ, start_response)
        body = json.dumps(probe.body).encode()
        reason = "OK" if probe.status == 200 else "Service Unavailable"
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        start_response(f"{probe.status} {reason}", headers)
        return [body]

    return app


def _server(addr: str, port: int, app: Wsgi) -> WSGIServer:
    """A threaded WSGI server on (addr, port) that logs no request lines (as
    prometheus_client's own)."""
    import socket
    import socketserver
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Threaded(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

    return make_server(addr, port, app, Threaded, handler_class=Quiet)
