"""Run the sandbox in a background thread, and talk to its inspection API."""

from __future__ import annotations

import errno
import json
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import requests
import uvicorn

from airflow_provider_sms.sandbox.app import create_app
from airflow_provider_sms.sandbox.state import SandboxConfig, SandboxState

if TYPE_CHECKING:
    from typing_extensions import Self

START_TIMEOUT = 30.0


class InspectionClient:
    """Client of the sandbox's inspection API (``/_sandbox/``, no token): what was sent, credits, faults.

    A refusal raises :class:`requests.HTTPError` quoting the sandbox's message (which names the field).

    :param url: the sandbox's base URL.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + "/_sandbox"
        self._session = requests.Session()

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        response = self._session.request(method, self.url + path, json=payload, timeout=30)
        if not response.ok:
            raise requests.HTTPError(
                f"sandbox inspection {method} {path}: HTTP {response.status_code}: {response.text}",
                response=response,
            )
        return response.json()

    def _object(self, method: str, path: str, payload: Any = None) -> dict[str, Any]:
        body = self._call(method, path, payload)
        if not isinstance(body, dict):
            raise TypeError(f"sandbox inspection {method} {path}: expected a JSON object, got {body!r:.200}")
        return body

    def _list(self, method: str, path: str) -> list[dict[str, Any]]:
        body = self._call(method, path)
        if not isinstance(body, list):
            raise TypeError(f"sandbox inspection {method} {path}: expected a JSON array, got {body!r:.200}")
        return body

    def campaigns(self) -> list[dict[str, Any]]:
        """Every campaign created (sends only, simulations create none), oldest first.

        Each is a dict: ticket, endpoint, text (short URLs inserted), pushtype, sender, delay, links,
        recipients (as sent, with gsmsmsid), lists, sent_to (numbers left after filtering), parts, cost,
        created_at.
        """
        return self._list("GET", "/campaigns")

    def delivery_reports(self) -> dict[str, Any]:
        """The DLR calls made: ``attempted`` (every try) and ``acknowledged`` (the reports answered 2xx,
        whole). For big campaigns, :meth:`delivery_report_counts` and :meth:`delivery_report_ledger`."""
        return self._object("GET", "/delivery-reports")

    def delivery_report_counts(self) -> dict[str, Any]:
        """Where the posting of delivery reports stands, in a few numbers (cheap to poll).

        ``reports`` (registered to be posted), ``acknowledged`` (answered 2xx), ``given_up`` (every try
        failed), ``in_progress`` (still being tried), ``tries`` (every call), ``answers`` (calls by
        HTTP code, ``"0"`` for no answer) and ``retry_after`` (of those not 2xx, by code, how many
        carried a ``Retry-After``).
        """
        return self._object("GET", "/delivery-reports/counts")

    def delivery_report_ledger(self) -> list[dict[str, Any]]:
        """Every delivery report posted since the reset, the ground truth to compare a receiver with.

        One dict per report, in the order they were made: ``campaign_id``, ``destination``, ``status``,
        ``tries`` (calls made), ``code`` (of the latest call; 0: no answer), ``acknowledged`` (a 2xx),
        ``done`` (acknowledged or given up).
        """
        body = self._object("GET", "/delivery-reports/ledger")
        columns = body["columns"]
        return [dict(zip(columns, row, strict=True)) for row in body["rows"]]

    def set_delivery_reports(
        self,
        enabled: bool,
        statuses: list[int] | None = None,
        tries: int | None = None,
        concurrency: int | None = None,
    ) -> dict[str, Any]:
        """Post (or stop posting) one delivery report per number sent to DLR webhook "1" after each send.

        :param statuses: the reports' statuses, taken in turn, number after number.
        :param tries: tries per report before the sandbox gives it up (backoff doubling up to
            ``dlr_max_wait``, 5 s by default).
        :param concurrency: reports of a campaign posted at once (default 1: one after the other).
        """
        payload = {"enabled": enabled, "statuses": statuses, "tries": tries, "concurrency": concurrency}
        return self._object("POST", "/delivery-reports", payload)

    def set_next_ticket(self, ticket: int) -> None:
        """Number the next campaign ``ticket`` (and on from there) until the next reset.

        :param ticket: the next campaign's ticket (after a reset, tickets come from the clock again, past
            every one handed out).
        """
        self._call("POST", "/tickets", {"next": ticket})

    def reset(self) -> None:
        """Back to the seeds: campaigns, credits, NPAI, webhooks and counters; faults cleared."""
        self._call("POST", "/reset")

    def credits(self) -> int:
        """The account's credit balance."""
        return int(self._object("GET", "/credits")["credits"])

    def set_credits(self, credits: int) -> None:
        """Set the account's credit balance.

        :param credits: the new balance (0 or more).
        """
        self._call("POST", "/credits", {"credits": credits})

    def price(self) -> int:
        """The credits one SMS part costs (1 after a reset)."""
        return int(self._object("GET", "/price")["price"])

    def set_price(self, price: int) -> None:
        """Set the credits one SMS part costs, from the next simulation or send on.

        :param price: credits per SMS part, 1 or more.
        """
        self._call("POST", "/price", {"price": price})

    def faults(self) -> dict[str, Any]:
        """The faults in force, with what is left of their counters."""
        return self._object("GET", "/faults")

    def set_faults(self, **faults: Any) -> None:
        """Replace the faults in force (see :class:`~airflow_provider_sms.sandbox.state.Faults`).

        :param faults: ``maybe_sent=N``, ``drop_after_record=N``, ``truncated=N``, ``empty_body=N``,
            ``wrong_content_type=N``, ``http_error=(code, N)``, ``rate_limit=(retry_after_seconds, N)``,
            ``slow=seconds`` or ``slow=(seconds, N)``, ``endpoints=[names]`` (``/send``, ``/send/lists``,
            ``/send/simulate``, ``/send/lists/simulate``, ``/webhook``, ``/npai``).
        """
        self._call("POST", "/faults", faults)

    def requests(self) -> dict[str, int]:
        """Requests received per endpoint name (``/send``, ..., ``/webhook``, ``/npai``) since the reset.

        Refused and faulty requests count too: a send made once shows 1, a read retried once 2.
        """
        return self._object("GET", "/requests")

    def clear_faults(self) -> None:
        """Remove every fault."""
        self._call("DELETE", "/faults")

    def npai(self) -> list[dict[str, Any]]:
        """Every NPAI entry, as GET /npai lists them."""
        return self._list("GET", "/npai")

    def add_npai(
        self, destination: str, campaign_id: int | None = None, date: str | None = None
    ) -> dict[str, Any]:
        """Add an NPAI entry; returns it.

        :param destination: the number, digits only.
        :param campaign_id: the campaign that produced it.
        :param date: ``Y-m-d H:i:s`` (Paris); defaults to now.
        """
        return self._object(
            "POST", "/npai", {"destination": destination, "campaign_id": campaign_id, "date": date}
        )

    def set_webhook(self, webhook_id: str, **fields: Any) -> dict[str, Any]:
        """Create or update a webhook record; returns it.

        :param webhook_id: the webhook's id.
        :param fields: fields of the record (type, url, status, signature, last_http_code).
        """
        return self._object("POST", f"/webhooks/{webhook_id}", fields)


class ThreadedServer:
    """An ASGI app as a real HTTP server on a background thread (uvicorn).

    :param app: the ASGI app to serve.
    :param host: address to bind (loopback by default).
    :param port: port to bind; 0 picks a free one (see :attr:`url`).
    :param name: what it is, in errors and in the thread's name.
    :param proxy_headers: take the client's address from ``X-Forwarded-For`` when the peer is trusted
        (uvicorn's ``FORWARDED_ALLOW_IPS``, 127.0.0.1 by default), as ``airflow api-server
        --proxy-headers`` does; off by default, as in the API server without that flag.
    :param lifespan: run the app's lifespan (startup and shutdown), as the Airflow API server does for
        its apps; off by default (the sandbox's app has none).
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "the server",
        *,
        proxy_headers: bool = False,
        lifespan: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.name = name
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level="warning",
                lifespan="on" if lifespan else "off",
                access_log=False,
                proxy_headers=proxy_headers,
            )
        )
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        """Start serving; returns once connections are accepted.

        :raises OSError: the address cannot be bound (a port in use, an address not of this machine),
            said in one line before uvicorn tries, rather than as uvicorn's log and a timeout.
        """
        self._check_address()
        self._thread = threading.Thread(target=self._server.run, name=self.name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def _check_address(self) -> None:
        with socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET) as probe:
            # As uvicorn binds: SO_REUSEADDR, so that a port in TIME_WAIT is not reported as in use.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((self.host, self.port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise OSError(exc.errno, f"port {self.port} on {self.host} is already in use") from None
                raise OSError(
                    exc.errno, f"cannot listen on {self.host}:{self.port} ({exc.strerror})"
                ) from None

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:41823`` (the real port once started)."""
        return f"http://{self.host}:{self.port}"


class SandboxServer(ThreadedServer):
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
        self.state = SandboxState(config or SandboxConfig(**config_fields))
        super().__init__(create_app(self.state, token), host, port, name="the sandbox")
        self._inspect: InspectionClient | None = None

    @property
    def inspect(self) -> InspectionClient:
        """A client of the inspection API (one per server, reusing its connection)."""
        if self._inspect is None or not self._inspect.url.startswith(self.url + "/"):
            self._inspect = InspectionClient(self.url)
        return self._inspect

    def connection_json(self, format: str = "json", **extra: Any) -> str:
        """The sandbox as an Airflow connection in JSON form, for ``AIRFLOW_CONN_SMS_DEFAULT``.

        :param format: the wire format the hook uses, ``json`` or ``xml``.
        :param extra: more connection extras (``timeout``, ``default_sender``...).
        """
        return json.dumps(
            {
                "conn_type": "sms",
                "host": self.url,
                "password": self.token,
                "extra": {"format": format, **extra},
            }
        )
