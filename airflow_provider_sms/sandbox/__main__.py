"""``python -m airflow_provider_sms.sandbox`` / ``sms-sandbox``: run the sandbox until SIGINT/SIGTERM.

Standard output gets exactly one line, ``SMS sandbox listening on http://HOST:PORT``, once connections
are accepted, so that scripts can read the URL (port 0 picks a free port); anything else goes to stderr.
A bad argument, or an address that cannot be bound, is one line on stderr and exit status 2: never a
traceback. ``sms-sandbox reset URL`` puts a running sandbox back to its seeds.
"""

from __future__ import annotations

import argparse
import copy
import errno
import ipaddress
import signal
import sys
import threading
from typing import Any
from urllib.parse import urlsplit

import requests
from pydantic import ValidationError

from airflow_provider_sms._validation import format_errors
from airflow_provider_sms.sandbox.dlr_poster import DLR_WEBHOOK_ID, LOOPBACK_HOSTS
from airflow_provider_sms.sandbox.server import InspectionClient, SandboxServer
from airflow_provider_sms.sandbox.state import (
    DEFAULT_ALLOWED_PREFIXES,
    DEFAULT_SEEDS,
    Faults,
    SandboxConfig,
    Seeds,
)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return key.strip(), value.strip()


FAULT_NAMES = tuple(name for name in Faults.model_fields if name != "endpoints")


def _faults(pairs: list[tuple[str, str]]) -> Faults:
    """``--fault`` options as faults: ``http_error=503,2`` is a pair, ``endpoints=/send,/npai`` a list.

    ``slow`` is seconds (``slow=2``) or a pair (``slow=2,1``: only the next request waits).

    :raises ValueError: naming the option and, for an unknown fault, the valid ones.
    """
    fields: dict[str, object] = {}
    for key, value in pairs:
        if key not in Faults.model_fields:
            raise ValueError(
                f"--fault {key}={value}: unknown fault {key!r}; valid faults: {', '.join(FAULT_NAMES)} "
                "(and endpoints=/send,/npai to scope them)"
            )
        split = key in ("http_error", "rate_limit", "endpoints") or (key == "slow" and "," in value)
        fields[key] = value.split(",") if split else value
    try:
        return Faults.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"--fault {name}: {text}" for name, text in format_errors(exc))
        raise ValueError(problems) from None


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``sms-sandbox``."""
    parser = argparse.ArgumentParser(
        prog="sms-sandbox",
        description="Local emulator of the SMS service. `sms-sandbox reset URL` puts a running one back "
        "to its seeds (campaigns, credits, NPAI entries, faults).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    parser.add_argument(
        "--port",
        type=int,
        default=8080,
        help="port; 0 picks a free one, the safer choice next to Airflow, whose API server uses 8080 "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--token", default="sandbox-token", help="access token to accept (default: %(default)s)"
    )
    parser.add_argument(
        "--credits", type=int, default=DEFAULT_SEEDS.credits, help="starting credits (default: %(default)s)"
    )
    parser.add_argument(
        "--fault",
        type=_key_value,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="inject a fault from the start (repeatable): maybe_sent=N, drop_after_record=N, "
        "bad_success_shape=N, unknown_error=N, truncated=N, empty_body=N, wrong_content_type=N, "
        "http_error=CODE,N, rate_limit=SECONDS,N, slow=SECONDS (or SECONDS,N), endpoints=/send,/npai",
    )
    parser.add_argument(
        "--allowed-prefixes",
        default=",".join(DEFAULT_ALLOWED_PREFIXES),
        help="comma-separated dialling prefixes messages may go to (default: %(default)s)",
    )
    parser.add_argument(
        "--country-limit",
        type=_key_value,
        action="append",
        default=[],
        metavar="PREFIX=N",
        help="monthly messages allowed to a dialling prefix (repeatable; none: no limit)",
    )
    parser.add_argument(
        "--flood-limit", type=int, default=5, help="messages per number per window (default: %(default)s)"
    )
    parser.add_argument(
        "--flood-window", type=float, default=3600.0, help="anti-flood window, seconds (default: %(default)s)"
    )
    parser.add_argument(
        "--dlr", action="store_true", help='POST delivery reports to DLR webhook "1" (127.0.0.1 only)'
    )
    parser.add_argument(
        "--dlr-url",
        metavar="URL",
        help='DLR webhook "1"\'s URL, kept across resets (implies --dlr; on 127.0.0.1 or localhost), e.g. '
        "http://127.0.0.1:8080/sms/delivery-reports/sms_default for Airflow's API server",
    )
    return parser


def _dlr_webhooks(url: str | None) -> dict[str, dict[str, Any]]:
    """The seeded webhooks, with webhook "1" pointing at ``url`` when given (checked)."""
    webhooks = copy.deepcopy(DEFAULT_SEEDS.webhooks)
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or parts.hostname not in LOOPBACK_HOSTS:
            raise ValueError(
                f"--dlr-url {url}: must be an http(s) URL on 127.0.0.1 or localhost (the sandbox posts "
                "reports nowhere else)"
            )
        webhooks[DLR_WEBHOOK_ID]["url"] = url
    return webhooks


def reset(argv: list[str]) -> int:
    """``sms-sandbox reset URL``: put a running sandbox back to its seeds."""
    parser = argparse.ArgumentParser(
        prog="sms-sandbox reset",
        description="Put a running sandbox back to its seeds: campaigns, credits, NPAI entries (numbers "
        "made unreachable by earlier runs), webhooks, counters and faults.",
    )
    parser.add_argument("url", help="the sandbox's URL, as it printed it (e.g. http://127.0.0.1:41823)")
    args = parser.parse_args(argv)
    try:
        InspectionClient(args.url).reset()
    except requests.RequestException as exc:
        reason = "nothing answers there: is it running?" if isinstance(exc, requests.ConnectionError) else exc
        print(f"sms-sandbox reset: could not reset the sandbox at {args.url}: {reason}", file=sys.stderr)
        return 1
    print(f"SMS sandbox at {args.url} reset to its seeds")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the sandbox in the foreground until SIGINT or SIGTERM (or ``reset`` a running one).

    :param argv: the arguments (default: the command line).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["reset"]:
        return reset(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        for name in ("credits", "flood_limit", "flood_window", "port"):
            if getattr(args, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be 0 or more")
        faults = _faults(args.fault)
        config = SandboxConfig(
            allowed_prefixes=tuple(p.strip() for p in args.allowed_prefixes.split(",") if p.strip()),
            flood_limit=args.flood_limit,
            flood_window=args.flood_window,
            country_limits={prefix: int(limit) for prefix, limit in args.country_limit},
            seeds=Seeds(credits=args.credits, webhooks=_dlr_webhooks(args.dlr_url)),
            dlr=args.dlr or args.dlr_url is not None,
        )
    except ValueError as exc:  # pydantic ValidationError included
        return _refuse(str(exc))

    server = SandboxServer(token=args.token, host=args.host, port=args.port, config=config)
    server.state.faults = faults
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server.start()
    except OSError as exc:
        hint = (
            "; pick another with --port, or --port 0 for a free one" if exc.errno == errno.EADDRINUSE else ""
        )
        return _refuse(f"{exc.strerror}{hint}")
    print(f"SMS sandbox listening on {server.url}", flush=True)
    warning = exposure_warning(args.host)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    stop.wait()
    server.stop()
    print("SMS sandbox stopped", file=sys.stderr, flush=True)
    return 0


def exposure_warning(host: str) -> str | None:
    """What the sandbox says at start when ``--host`` may be reachable from other machines (an address
    that is not loopback, or a name other than localhost, which may resolve to anything)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return (
        f"sms-sandbox: WARNING: listening on {host}, which is not a loopback address: whoever can reach "
        "this machine on that port can read every message and phone number sent to the sandbox through "
        "its inspection API (/_sandbox, no token needed), reset it and inject faults. It is a local "
        "emulator: give --host 127.0.0.1 unless other machines must reach it on purpose."
    )


def _refuse(reason: str) -> int:
    print(f"sms-sandbox: {reason}", file=sys.stderr, flush=True)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
