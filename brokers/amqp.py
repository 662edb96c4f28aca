"""AMQP connection failures described the same way everywhere: where (host:port, vhost, user) and why.

pika nests its connection errors (a connector error around the socket's, a broker's close around
its reply); operators need the innermost reason, and never the password.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pika


def amqp_failure_reason(error: BaseException | str) -> str:
    """The innermost reason in pika's nested connection errors (refused socket, failed login, unknown vhost):
    ``[Errno 111] Connection refused``, ``ACCESS_REFUSED - Login was refused … (403)``."""
    current: Any = error
    for _ in range(6):
        failures = getattr(current, "exceptions", None)
        if failures:
            current = failures[-1]
            continue
        inner = getattr(current, "exception", None)  # pika's connector errors wrap the socket's error
        if isinstance(inner, BaseException):
            current = inner
            continue
        args: tuple[object, ...] = getattr(current, "args", ())
        if isinstance(current, OSError):
            return f"[Errno {current.errno}] {current.strerror}" if current.errno else str(current)
        if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):
            return f"{args[1]} ({args[0]})"
        if args and isinstance(args[0], BaseException):
            current = args[0]
            continue
        break
    text = str(current).strip()
    closed = re.search(r"\((\d+)\) '([^']*)'", text)  # ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - …'
    if closed:
        return f"{closed[2]} ({closed[1]})"
    return text or type(current).__name__


def amqp_address(parameters: pika.ConnectionParameters) -> str:
    """``127.0.0.1:5672 vhost '/' as 'guest'``: where an AMQP URL connects, without its password."""
    return (
        f"{parameters.host}:{parameters.port} vhost {parameters.virtual_host!r} as {parameters.credentials.username!r}"
    )


@dataclass(frozen=True)
class TlsMaterial:
    """TLS for ``amqps://`` as PEM text, not paths: it is pickled to Spark executors, where the driver's
    files need not exist. ``insecure`` skips the certificate and host name checks."""

    ca_pem: str | None = None
    client_cert_pem: str | None = None
    client_key_pem: str | None = None
    insecure: bool = False

    @classmethod
    def from_files(
        cls,
        ca: str | None = None,
        client_cert: str | None = None,
        client_key: str | None = None,
        insecure: bool = False,
    ) -> TlsMaterial:
        def text(path: str | None) -> str | None:
            return Path(path).read_text() if path else None

        return cls(text(ca), text(client_cert), text(client_key), insecure)

    def context(self) -> ssl.SSLContext:
        """An SSL context: the CA (else the system's), no checks when insecure, the client certificate if any."""
        context = ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem else ssl.create_default_context()
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert_pem:
            # ssl loads a certificate chain from files only: a private directory that is gone right after.
            with tempfile.TemporaryDirectory(prefix="nsb-delays-tls-") as directory:
                cert, key = Path(directory, "client.pem"), Path(directory, "client.key")
                cert.write_text(self.client_cert_pem)
                if self.client_key_pem:
                    key.write_text(self.client_key_pem)
                    os.chmod(key, 0o600)
                context.load_cert_chain(cert, key if self.client_key_pem else None)
        return context


@dataclass(frozen=True)
class AmqpNodes:
    """Where and how to connect over AMQP, picklable for Spark executors: one URL per node of a cluster
    (tried in turn), the vhost, the login used when a URL carries none, and TLS for ``amqps`` URLs."""

    urls: tuple[str, ...]
    vhost: str = "/"
    credentials: tuple[str, str] | None = None
    tls: TlsMaterial = field(default_factory=TlsMaterial)
    connection_name: str = "nsb-delays"

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("at least one AMQP URL is needed")

    def parameters(self, url: str | None = None) -> pika.ConnectionParameters:
        """pika's parameters for ``url`` (default: the first node), vhost, login and TLS applied."""
        url = url or self.urls[0]
        parameters = pika.URLParameters(url)
        if urlsplit(url).username is None and self.credentials:
            parameters.credentials = pika.PlainCredentials(*self.credentials)
        parameters.virtual_host = self.vhost
        parameters.client_properties = {"connection_name": self.connection_name}
        if urlsplit(url).scheme == "amqps":
            parameters.ssl_options = pika.SSLOptions(self.tls.context(), urlsplit(url).hostname or "")
        return parameters

    def every_node(self) -> list[pika.ConnectionParameters]:
        return [self.parameters(url) for url in self.urls]
