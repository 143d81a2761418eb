"""An answer's bytes read within a size bound, decompression included: the one bound of every answer.

Both hooks read the service's answers through :class:`BoundedBody`, and the delivery-reports client
reads the receiver's summary through it, so a huge or compressed-bomb answer costs at most the bound,
whoever reads it. An answer over the bound raises
:class:`~airflow_provider_sms.exceptions.ResponseTooLargeError`. Not public API.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from airflow_provider_sms.exceptions import ResponseTooLargeError, SmsApiError

if TYPE_CHECKING:
    from collections.abc import Mapping

# Largest answer read into memory; a bigger one is refused rather than exhausting the worker.
# This one is for long lists (GET /npai, which may be long when the service ignores paging, and the
# delivery-reports summary with its failed numbers).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# Largest answer of every other endpoint (a campaign result, a webhook record or an error): they are
# well under 1 KB, so reading megabytes of one is pointless; 1 MiB leaves room for a proxy's HTML page.
MAX_SMALL_RESPONSE_BYTES = 1024 * 1024


def response_too_large(http_status: int, endpoint: str, limit: int) -> ResponseTooLargeError:
    """The error for an answer larger than ``limit`` bytes (refused instead of exhausting memory)."""
    size = f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0 else f"{limit} bytes"
    return ResponseTooLargeError(
        None,
        f"the answer is too large: larger than {size}, the most an answer of this endpoint may be; "
        "refused without reading the rest",
        http_status=http_status,
        endpoint=endpoint,
    )


class BoundedBody:
    """An answer's bytes gathered as they arrive, refused once they exceed ``limit``: the one size bound.

    Both hooks read every answer through this class, and the delivery-reports client the summary
    (raw bytes from httpx, as the async hook). The sync hook feeds it bytes that urllib3 has
    already decompressed (urllib3 bounds each decompression step itself), so it passes
    ``decompress=False``; the async hook feeds it httpx's raw bytes, and the decompression is
    bounded here, because httpx inflates a whole network chunk at once (a small gzip chunk may become
    megabytes in one piece). Either way a compression bomb costs at most ``limit`` bytes.

    :param headers: the answer's headers (``Content-Encoding``, ``Content-Length``).
    :param http_status: the answer's HTTP status, for the error.
    :param endpoint: ``METHOD /path``, for the error.
    :param limit: the most decoded bytes accepted (for the service's answers, the hooks'
        ``response_limit`` of the endpoint).
    :param decompress: decode ``Content-Encoding`` here (raw bytes) or take the bytes as they come.
    """

    def __init__(
        self,
        headers: Mapping[str, str],
        http_status: int,
        endpoint: str,
        limit: int,
        *,
        decompress: bool = True,
    ) -> None:
        self.http_status = http_status
        self.endpoint = endpoint
        self.limit = limit
        self.size = 0
        self._chunks: list[bytes] = []
        if _declared_too_large(headers, limit):
            raise response_too_large(http_status, endpoint, limit)
        encoding = (headers.get("Content-Encoding") or "identity").strip().lower() if decompress else ""
        if encoding in ("gzip", "x-gzip", "deflate"):
            # 32 + MAX_WBITS: zlib or gzip header, detected; "deflate" is zlib-wrapped (RFC 9110).
            self._decoder: zlib._Decompress | None = zlib.decompressobj(32 + zlib.MAX_WBITS)
        elif encoding in ("identity", ""):
            self._decoder = None
        else:
            raise SmsApiError(
                None,
                f"the answer uses Content-Encoding {encoding!r}, which was not asked for "
                "(only gzip and deflate are accepted)",
                http_status=http_status,
                endpoint=endpoint,
            )

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the answer (compressed, when this object decompresses)."""
        if self._decoder is None:
            self._add(data)
            return
        try:
            while data:
                # Never more than one byte beyond the limit per call: the bomb is not expanded.
                self._add(self._decoder.decompress(data, self.limit - self.size + 1))
                data = self._decoder.unconsumed_tail
        except zlib.error as exc:
            raise SmsApiError(
                None,
                f"the compressed answer could not be decoded ({exc})",
                http_status=self.http_status,
                endpoint=self.endpoint,
            ) from None

    def result(self) -> bytes:
        """The whole decoded answer."""
        if self._decoder is not None:
            self._add(self._decoder.flush())
        return b"".join(self._chunks)

    def _add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise response_too_large(self.http_status, self.endpoint, self.limit)
        self._chunks.append(data)


def _declared_too_large(headers: Mapping[str, str], limit: int) -> bool:
    try:
        return int(headers.get("Content-Length") or 0) > limit
    except ValueError:
        return False  # a malformed length: the streamed count still bounds the read
