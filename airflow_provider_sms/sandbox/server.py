"""Run the sandbox in a background thread, and talk to its inspection API."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import requests
import uvicorn

from airflow_provider_sms.sandbox.app import create_app
from airflow_provider_sms.sandbox.state import SandboxConfig, SandboxState

START_TIMEOUT = 30.0


class InspectionClient:
    """Client of the sandbox's inspection API (``/_sandbox/``): what was sent, credits, faults.

    :param url: the sandbox's base URL.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + "/_sandbox"
        self._session = requests.Session()

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        response = self._session.request(method, self.url + path, json=payload, timeout=30)
        response.raise_for_status()
        return response.json()

    def campaigns(self) -> list[dict[str, Any]]:
        """Every campaign created (sends only), oldest first."""
        return self._call("GET", "/campaigns")

    def reset(self) -> None:
        """Back to the seeds, faults cleared."""
        self._call("POST", "/reset")

    def credits(self) -> int:
        return self._call("GET", "/credits")["credits"]

    def set_credits(self, credits: int) -> None:
        self._call("POST", "/credits", {"credits": credits})

    def set_faults(self, **faults: Any) -> None:
        """Inject faults: ``maybe_sent=N``, ``drop_after_record=N``, ``http_error=(code, N)``,
        ``rate_limit=(retry_after_seconds, N)``, ``slow=seconds``, ``endpoints=[paths]``."""
        self._call("POST", "/faults", faults)

    def clear_faults(self) -> None:
        self._call("DELETE", "/faults")

    def npai(self) -> list[dict[str, Any]]:
        return self._call("GET", "/npai")

    def add_npai(
        self, destination: str, campaign_id: int | None = None, date: str | None = None
    ) -> dict[str, Any]:
        return self._call(
            "POST", "/npai", {"destination": destination, "campaign_id": campaign_id, "date": date}
        )

    def set_webhook(self, webhook_id: str, **fields: Any) -> dict[str, Any]:
        return self._call("POST", f"/webhooks/{webhook_id}", fields)


class SandboxServer:
    """The sandbox as a real HTTP server on a background thread.

    :param token: the access token it accepts.
    :param host: address to bind (loopback by default).
    :param port: port to bind; 0 picks a free one (see :attr:`url`).
    :param config: its rules and seeds (:class:`SandboxConfig`); keyword arguments build one.
    """

    def __init__(
        self,
        token: str = "sandbox-token",
        host: str = "127.0.0.1",
        port: int = 0,
        config: SandboxConfig | None = None,
        **config_fields: Any,
    ) -> None:
        self.token = token
        self.host = host
        self.port = port
        self.state = SandboxState(config or SandboxConfig(**config_fields))
        self._server = uvicorn.Server(
            uvicorn.Config(
                create_app(self.state, token),
                host=host,
                port=port,
                log_level="warning",
                lifespan="off",
                access_log=False,
            )
        )
        self._thread: threading.Thread | None = None

    def start(self) -> SandboxServer:
        """Start serving; returns once connections are accepted."""
        self._thread = threading.Thread(target=self._server.run, name="sms-sandbox", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the sandbox did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def inspect(self) -> InspectionClient:
        return InspectionClient(self.url)

    def connection_json(self, format: str = "json", **extra: Any) -> str:
        """The sandbox as an Airflow connection, for ``AIRFLOW_CONN_SMS_DEFAULT``."""
        return json.dumps(
            {
                "conn_type": "sms",
                "host": self.url,
                "password": self.token,
                "extra": {"format": format, **extra},
            }
        )
