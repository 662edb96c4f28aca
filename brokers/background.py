"""Work on a daemon thread, its outcome as a ``Future``: slow I/O (a broker's export, a JVM's start) overlaps the
caller's own work, and an interrupted or refused run exits at once instead of waiting for that I/O to end."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(work: Callable[[], T], name: str) -> Future[T]:
    """``work()`` on a daemon thread named ``name``; its result, or its exception, through the returned future (a
    pool's worker thread would hold the process's exit until the work ends)."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as error:  # handed to whoever waits for the result
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
