"""SmsAsyncHook for tests: given settings instead of an Airflow connection, and an httpx transport."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from airflow_provider_sms.hooks.sms import SmsAsyncHook, SmsConnectionSettings

Handler = Callable[[httpx.Request], httpx.Response]


def mock_transport(handler: Handler) -> httpx.MockTransport:
    """A transport answering with ``handler``'s responses, streamed as a network answer is (not pre-read)."""

    def streamed(request: httpx.Request) -> httpx.Response:
        response = handler(request)
        return httpx.Response(
            response.status_code, headers=response.headers, stream=httpx.ByteStream(response.content)
        )

    return httpx.MockTransport(streamed)


def async_hook(
    settings: SmsConnectionSettings, transport: httpx.AsyncBaseTransport | None = None
) -> SmsAsyncHook:
    """A hook on ``settings``; its client (built now: tests measure reads alone) uses ``transport``."""
    hook = SmsAsyncHook()
    hook._settings = settings
    hook._http = hook._client(settings, transport)
    return hook
