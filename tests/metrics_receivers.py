"""What a metrics backend receives from Airflow, on 127.0.0.1: a StatsD server (UDP) and an
OpenTelemetry collector (OTLP over HTTP, decoded with ``opentelemetry-proto``).

Both run in a thread of the test process and keep everything they receive, raw, so that a test can
check the figures and that nothing personal went out.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True)
class StatsdLine:
    """One StatsD metric: ``name:value|type`` (a datagram may hold several, one per line)."""

    name: str
    value: float
    kind: str

    @classmethod
    def parse(cls, line: str) -> StatsdLine:
        name, rest = line.split(":", 1)
        value, kind = rest.split("|")[:2]
        return cls(name, float(value), kind)


class StatsdServer:
    """A StatsD server on a free UDP port of 127.0.0.1; :attr:`lines` holds every line received."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port: int = self.socket.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="statsd-server", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                datagram = self.socket.recv(65536)
            except TimeoutError:
                continue
            self.lines.extend(datagram.decode().splitlines())

    def env(self, prefix: str = "airflow") -> dict[str, str]:
        """Airflow's settings that send its metrics here."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": prefix,
        }

    def metrics(self) -> list[StatsdLine]:
        """Every line received, parsed."""
        return [StatsdLine.parse(line) for line in list(self.lines) if line]

    def total(self, name: str) -> float:
        """The sum of the counter ``name`` (its full name, Airflow's prefix included)."""
        return sum(line.value for line in self.metrics() if line.name == name and line.kind == "c")

    def last(self, name: str) -> float | None:
        """The last value of the gauge or timer ``name``, or None if none arrived."""
        values = [line.value for line in self.metrics() if line.name == name]
        return values[-1] if values else None

    def names(self) -> set[str]:
        """Every metric name received."""
        return {line.name for line in self.metrics()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()


@dataclass
class OtlpPoint:
    """One data point an OpenTelemetry export carried."""

    name: str
    kind: str
    value: float
    attributes: dict[str, str]


@dataclass
class OtlpReceiver:
    """An OpenTelemetry collector's OTLP/HTTP metrics endpoint (``POST /v1/metrics``) on 127.0.0.1."""

    exports: list[bytes] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.paths.append(self.path)
                receiver.exports.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()

    def env(self, prefix: str = "airflow") -> dict[str, str]:
        """Airflow's settings that export its metrics here, every second."""
        return {
            "AIRFLOW__METRICS__OTEL_ON": "True",
            "AIRFLOW__METRICS__OTEL_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__OTEL_PORT": str(self.port),
            "AIRFLOW__METRICS__OTEL_PREFIX": prefix,
            "AIRFLOW__METRICS__OTEL_INTERVAL_MILLISECONDS": "1000",
            "AIRFLOW__METRICS__OTEL_SSL_ACTIVE": "False",
        }

    def points(self) -> Iterator[OtlpPoint]:
        """Every data point of every export received, decoded."""
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        for body in list(self.exports):
            request = ExportMetricsServiceRequest.FromString(body)
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        data = getattr(metric, kind)
                        for point in data.data_points:
                            value = (
                                point.sum
                                if kind in ("histogram", "exponential_histogram")
                                else getattr(point, point.WhichOneof("value"))
                            )
                            attributes = {a.key: a.value.string_value for a in point.attributes}
                            yield OtlpPoint(metric.name, kind, float(value), attributes)

    def latest(self, name: str) -> dict[tuple[tuple[str, str], ...], OtlpPoint]:
        """The last point of ``name`` for each set of attributes (counters are cumulative)."""
        latest: dict[tuple[tuple[str, str], ...], OtlpPoint] = {}
        for point in self.points():
            if point.name == name:
                latest[tuple(sorted(point.attributes.items()))] = point
        return latest

    def total(self, name: str, **attributes: str) -> float:
        """The cumulative value of the counter ``name`` over the attribute sets matching ``attributes``."""
        by_set: defaultdict[tuple[tuple[str, str], ...], float] = defaultdict(float)
        for key, point in self.latest(name).items():
            if all(point.attributes.get(k) == v for k, v in attributes.items()):
                by_set[key] = point.value
        return sum(by_set.values())

    def wait_for(self, name: str, timeout: float = 10.0) -> None:
        """Wait until an export carrying ``name`` arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(point.name == name for point in self.points()):
                return
            time.sleep(0.2)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
