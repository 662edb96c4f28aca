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


_THREADS_LEFT_AT_EXIT: list[str] = []


def leave_threads_at_exit(owner: str) -> None:
    """Have the command-line entry point end the process right after the command's report, without joining the
    threads ``owner`` (a library) runs: CPython joins every thread pool's workers before the ``atexit`` handlers
    (``concurrent.futures.thread._python_exit``), however long their retries sleep."""
    if owner not in _THREADS_LEFT_AT_EXIT:
        _THREADS_LEFT_AT_EXIT.append(owner)


def threads_left_at_exit() -> tuple[str, ...]:
    """The owners of threads the process does not wait for at its end (``leave_threads_at_exit``)."""
    return tuple(_THREADS_LEFT_AT_EXIT)
