"""``python -m airflow_provider_sms.sandbox`` / ``sms-sandbox``: run the sandbox until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import json
import signal
import threading

from airflow_provider_sms.sandbox.server import SandboxServer
from airflow_provider_sms.sandbox.state import Faults, SandboxConfig, Seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sms-sandbox", description="Local emulator of the SMS service.")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port; 0 picks a free one (default 8080)")
    parser.add_argument("--token", default="sandbox-token", help="access token to accept")
    parser.add_argument("--credits", type=int, default=Seeds().credits, help="starting credits")
    parser.add_argument(
        "--dlr", action="store_true", help="POST delivery reports to DLR webhook 1 (loopback)"
    )
    parser.add_argument("--faults", default=None, help="faults as JSON, e.g. '{\"maybe_sent\": 1}'")
    args = parser.parse_args(argv)

    server = SandboxServer(
        token=args.token,
        host=args.host,
        port=args.port,
        config=SandboxConfig(seeds=Seeds(credits=args.credits), dlr=args.dlr),
    )
    if args.faults:
        server.state.faults = Faults(**json.loads(args.faults))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    print(f"SMS sandbox listening on {server.url}", flush=True)
    stop.wait()
    server.stop()
    print("SMS sandbox stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
