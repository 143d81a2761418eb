"""Real TLS on 127.0.0.1 for the tests: the sandbox behind a TLS front that can break its answers.

:class:`TlsFront` accepts TLS connections with a self-signed certificate made at test time
(:func:`make_certificate`), reads each request whole (head and ``Content-Length`` body), relays it to
an upstream HTTP server (the sandbox, so a send's campaign is recorded) and writes the answer back,
one request per connection. Set ``breaks`` and the next answers are broken instead, once the request
was relayed, where ``break_at`` says:

- :data:`BEFORE_STATUS`: bytes that are no TLS record (:data:`NOT_TLS`) are written on the TCP socket
  under the TLS layer, before any byte of the answer;
- :data:`AFTER_STATUS`: the answer's status line and headers go through TLS, then those bytes.

The client's TLS layer fails on them: requests raises ``SSLError``, the class it raises for a failed
handshake too. ``close_in_handshake`` closes each connection during the handshake instead, after
reading the ClientHello. :class:`ConnectProxy` is an HTTP proxy that refuses CONNECT or tunnels it.

Everything is bounded in time: a server's thread stops at ``stop()`` or after ``lifetime`` seconds,
every socket has a timeout and is closed in ``finally``. Nothing here logs or keeps a request's bytes
(they hold the suite's canary token): only the method, path and body size of each request.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

BEFORE_STATUS = "before the status line"
AFTER_STATUS = "after the status line"
# Its first byte is no TLS record type: the client's TLS layer fails on it.
NOT_TLS = b"\x00not a TLS record\r\n"
# Bounds: a test never waits on these servers longer.
IO_TIMEOUT = 5.0
LIFETIME = 120.0
MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files (``cert`` is also the CA file)."""

    cert: Path
    key: Path


def make_certificate(folder: Path) -> Certificate:
    """A self-signed certificate (ECDSA P-256) for 127.0.0.1 and localhost, valid for a day, in ``folder``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sms provider tests")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        # Its own CA, so that it can be the trust anchor given as ``verify``.
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    files = Certificate(folder / "cert.pem", folder / "key.pem")
    files.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


class _Server:
    """A listening socket on 127.0.0.1 served one connection at a time by a thread that stops by itself."""

    name = "test server"

    def __init__(self, lifetime: float = LIFETIME) -> None:
        self.lifetime = lifetime
        self.errors: list[str] = []  # exception class names of connections that ended in one
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def port(self) -> int:
        """The port it listens on (started on first use)."""
        if self._listener is None:
            self.start()
        assert self._listener is not None
        return int(self._listener.getsockname()[1])

    def start(self) -> None:
        """Listen and serve in a thread, until :meth:`stop` or ``lifetime`` seconds."""
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.05)  # how often the thread looks at its stop event and deadline
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and wait (bounded) for the thread."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=IO_TIMEOUT + 1)

    def _serve(self) -> None:
        assert self._listener is not None
        deadline = time.monotonic() + self.lifetime
        try:
            while not self._stopping.is_set() and time.monotonic() < deadline:
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                try:
                    conn.settimeout(IO_TIMEOUT)
                    self._handle(conn)
                except OSError as exc:  # the client gave up: serve the next one
                    self.errors.append(type(exc).__name__)
                finally:
                    conn.close()
        finally:
            self._listener.close()

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError


class TlsFront(_Server):
    """A TLS server on 127.0.0.1 relaying each request to ``upstream``; it can break its answers.

    :param certificate: its certificate and key.
    :param upstream: the base URL of the HTTP server the requests are relayed to (``http://host:port``).

    Set ``breaks`` (how many answers to break, counted down), ``break_at`` (:data:`BEFORE_STATUS` or
    :data:`AFTER_STATUS`) and ``close_in_handshake`` before the client's call. It records
    ``requests`` (method, path, body bytes read), ``handshake_failures`` and ``hellos`` (bytes read
    from connections closed in the handshake).
    """

    name = "TLS front"

    def __init__(self, certificate: Certificate, upstream: str, lifetime: float = LIFETIME) -> None:
        super().__init__(lifetime)
        self.certificate = certificate
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.breaks = 0
        self.break_at = BEFORE_STATUS
        self.close_in_handshake = False
        self.requests: list[tuple[str, str, int]] = []
        self.handshake_failures = 0
        self.hellos: list[int] = []
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(certificate.cert, certificate.key)

    @property
    def url(self) -> str:
        """The base URL, ``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self.port}"

    def _handle(self, conn: socket.socket) -> None:
        if self.close_in_handshake:
            self.hellos.append(len(conn.recv(MAX_HEAD)))  # the ClientHello; then closed unanswered
            return
        try:
            tls = self._context.wrap_socket(conn, server_side=True)
        except OSError:  # ssl.SSLError included: the client refused the certificate, or went away
            self.handshake_failures += 1
            return
        try:
            method, path, headers, body = read_request(tls)
            self.requests.append((method, path, len(body)))
            answer = self._relay(method, path, headers, body)
            if self.breaks <= 0:
                tls.sendall(answer)
                return
            self.breaks -= 1
            if self.break_at == AFTER_STATUS:
                tls.sendall(answer[: answer.index(b"\r\n\r\n") + 4])
            socket.socket.sendall(tls, NOT_TLS)  # under the TLS layer: not a record
            # No close_notify; wait (bounded) for the client to give up, so that it reads the bytes
            # above rather than a reset.
            socket.socket.shutdown(tls, socket.SHUT_WR)
            while socket.socket.recv(tls, MAX_HEAD):
                pass
        finally:
            tls.close()

    def _relay(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        """The upstream's whole answer to the request, framed for one request per connection."""
        upstream = http.client.HTTPConnection(*self.upstream, timeout=IO_TIMEOUT)
        try:
            upstream.request(method, path, body=body or None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        finally:
            upstream.close()
        head = [f"HTTP/1.1 {response.status} {response.reason}"]
        head += [
            f"{name}: {value}"
            for name, value in response.getheaders()
            if name.lower() not in ("connection", "keep-alive", "content-length", "transfer-encoding")
        ]
        head += [f"Content-Length: {len(data)}", "Connection: close"]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data


class ConnectProxy(_Server):
    """An HTTP proxy on 127.0.0.1 for HTTPS: it answers CONNECT with ``status`` and, on 200, tunnels it.

    It records ``connects``: how many CONNECT requests it read.
    """

    name = "CONNECT proxy"

    def __init__(self, status: int = 200, lifetime: float = LIFETIME) -> None:
        super().__init__(lifetime)
        self.status = status
        self.connects = 0

    @property
    def url(self) -> str:
        """The proxy's URL, ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def _handle(self, conn: socket.socket) -> None:
        method, target, _, _ = read_request(conn)
        assert method == "CONNECT", method
        self.connects += 1
        if self.status != 200:
            conn.sendall(f"HTTP/1.1 {self.status} Refused by the test\r\nContent-Length: 0\r\n\r\n".encode())
            return
        host, _, port = target.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT) as remote:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            _pipe(conn, remote)


def _pipe(one: socket.socket, other: socket.socket) -> None:
    """Copy bytes both ways until a side closes, or nothing moves for IO_TIMEOUT seconds."""
    peers = {one: other, other: one}
    with selectors.DefaultSelector() as selector:
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ)
        while events := selector.select(timeout=IO_TIMEOUT):
            for key, _ in events:
                sock: Any = key.fileobj
                data = sock.recv(MAX_HEAD)
                if not data:
                    return
                peers[sock].sendall(data)


def read_request(sock: socket.socket) -> tuple[str, str, dict[str, str], bytes]:
    """One HTTP/1.1 request read whole: method, target, headers, and the ``Content-Length`` body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(MAX_HEAD)
        if not chunk or len(data) > MAX_HEAD:
            raise ConnectionError("no complete request head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    request_line, *lines = head.decode("latin-1").split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name.lower() not in ("connection", "keep-alive"):
            headers[name.strip()] = value.strip()
    length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
    while len(body) < length:
        chunk = sock.recv(MAX_HEAD)
        if not chunk:
            raise ConnectionError("the request's body was cut")
        body += chunk
    return method, target, headers, body
