"""AMQP connection failures described the same way everywhere: where (host:port, vhost, user) and why.

pika nests its connection errors (a connector error around the socket's, a broker's close around
its reply); operators need the innermost reason, and never the password.
"""

from __future__ import annotations

import re
from typing import Any

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


def amqp_address(parameters: pika.URLParameters) -> str:
    """``127.0.0.1:5672 vhost '/' as 'guest'``: where an AMQP URL connects, without its password."""
    return (
        f"{parameters.host}:{parameters.port} vhost {parameters.virtual_host!r} as {parameters.credentials.username!r}"
    )
