"""``python -m airflow_provider_sms.sandbox`` / ``sms-sandbox``: run the sandbox until SIGINT/SIGTERM.

Standard output gets exactly one line, ``SMS sandbox listening on http://HOST:PORT``, once connections
are accepted, so that scripts can read the URL (port 0 picks a free port); anything else goes to stderr.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from airflow_provider_sms.sandbox.server import SandboxServer
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


def _faults(pairs: list[tuple[str, str]]) -> Faults:
    """``--fault`` options as faults: ``http_error=503,2`` is a pair, ``endpoints=/send,/npai`` a list.

    ``slow`` is seconds (``slow=2``) or a pair (``slow=2,1``: only the next request waits).
    """
    fields: dict[str, object] = {}
    for key, value in pairs:
        split = key in ("http_error", "rate_limit", "endpoints") or (key == "slow" and "," in value)
        fields[key] = value.split(",") if split else value
    return Faults.model_validate(fields)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``sms-sandbox``."""
    parser = argparse.ArgumentParser(prog="sms-sandbox", description="Local emulator of the SMS service.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port; 0 picks a free one (default 8080)")
    parser.add_argument("--token", default="sandbox-token", help="access token to accept")
    parser.add_argument("--credits", type=int, default=DEFAULT_SEEDS.credits, help="starting credits")
    parser.add_argument(
        "--fault",
        type=_key_value,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="inject a fault from the start (repeatable): maybe_sent=N, drop_after_record=N, truncated=N, "
        "empty_body=N, wrong_content_type=N, http_error=CODE,N, rate_limit=SECONDS,N, slow=SECONDS "
        "(or SECONDS,N), endpoints=/send,/npai",
    )
    parser.add_argument(
        "--allowed-prefixes",
        default=",".join(DEFAULT_ALLOWED_PREFIXES),
        help="comma-separated dialling prefixes messages may go to (default %(default)s)",
    )
    parser.add_argument(
        "--country-limit",
        type=_key_value,
        action="append",
        default=[],
        metavar="PREFIX=N",
        help="monthly messages allowed to a dialling prefix (repeatable; default: no limit)",
    )
    parser.add_argument("--flood-limit", type=int, default=5, help="messages per number per window")
    parser.add_argument("--flood-window", type=float, default=3600.0, help="anti-flood window, seconds")
    parser.add_argument(
        "--dlr", action="store_true", help='POST delivery reports to DLR webhook "1" (127.0.0.1 only)'
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the sandbox in the foreground until SIGINT or SIGTERM.

    :param argv: the arguments (default: the command line).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        faults = _faults(args.fault)
        config = SandboxConfig(
            allowed_prefixes=tuple(p.strip() for p in args.allowed_prefixes.split(",") if p.strip()),
            flood_limit=args.flood_limit,
            flood_window=args.flood_window,
            country_limits={prefix: int(limit) for prefix, limit in args.country_limit},
            seeds=Seeds(credits=args.credits),
            dlr=args.dlr,
        )
    except ValueError as exc:  # pydantic ValidationError included
        parser.error(str(exc))

    server = SandboxServer(token=args.token, host=args.host, port=args.port, config=config)
    server.state.faults = faults
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    print(f"SMS sandbox listening on {server.url}", flush=True)
    stop.wait()
    server.stop()
    print("SMS sandbox stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
