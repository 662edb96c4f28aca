"""A choice is checked where it enters and nowhere after (issue 39): the walk of ``queueType`` from the stack file
to ``pulumi_rabbitmq``, and of a component's ``queue_type`` from its Args, turns a string into its enum once.

A check is a call of ``settings.checked_value`` that is handed the string; each later one is handed the enum member
and passes it on. Observed with ``sys.setprofile`` (in the caller's thread and in the one recordings run in) while
the real program runs under Pulumi's mocks."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from nsb_delays.components.model import settings as model_settings
from nsb_delays.components.model.rabbitmq.names import QueueType
from nsb_delays.components.rabbitmq import RabbitMqEndpoint
from nsb_delays.components.recording import record
from nsb_delays.infra.program import declare
from nsb_delays.stack.config import parse_stack_config


@contextmanager
def queue_type_checks() -> Iterator[list[object]]:
    """The values ``checked_value`` is handed for a ``QueueType`` while the block runs."""
    handed: list[object] = []
    code = model_settings.checked_value.__code__

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code is code and frame.f_locals["hint"] is QueueType:
            handed.append(frame.f_locals["value"])

    sys.setprofile(profile)
    profile_the_recording_thread(profile)
    try:
        yield handed
    finally:
        sys.setprofile(None)
        profile_the_recording_thread(None)


def profile_the_recording_thread(hook: Callable[[FrameType, str, Any], None] | None) -> None:
    """Recordings run in one thread of their own (``components.recording.record``), already started: a profile
    reaches it from inside a recording."""
    record(lambda: sys.setprofile(hook))


def checks_in(build: Callable[[], Any]) -> list[object]:
    with queue_type_checks() as handed:
        registered = record(build)
    assert registered
    return [value for value in handed if not isinstance(value, QueueType)]


def test_the_stack_files_queue_type_is_checked_once_on_its_way_to_the_provider() -> None:
    raw = {"rabbitmq": {"queueType": "classic", "endpoints": ["Sales", {"name": "Billing"}]}}
    assert checks_in(lambda: declare(parse_stack_config(raw), {})) == ["classic"]


def test_a_components_queue_type_is_checked_once() -> None:
    args: Any = {"endpoint": "Sales", "queue_type": "classic"}
    assert checks_in(lambda: RabbitMqEndpoint("sales", args)) == ["classic"]
