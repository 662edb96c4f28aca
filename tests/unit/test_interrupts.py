"""Ctrl-C and SIGTERM end a command as interrupted (exit 130), even when the interrupt lands where Python drops it."""

from __future__ import annotations

import os
import signal

import pytest

from nsb_delays.infra.commands.errors import sigterm_as_interrupt


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_unwinds_the_block(signum: int) -> None:
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signum)
        for _ in range(1000):  # bytecode boundaries for the handler to run at
            pass


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_dropped_on_the_way_is_raised_when_the_block_ends(signum: int) -> None:
    """Python prints and drops an exception raised inside a garbage collector's finalizer: here the block itself
    swallows it, as that finalizer would; the command must still end as interrupted."""
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        try:
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # bytecode boundaries for the handler to run at
                pass
        except KeyboardInterrupt:
            pass  # dropped


def test_the_handlers_are_restored_afterwards() -> None:
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    with sigterm_as_interrupt():
        pass
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
