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
from nsb_delays.components.model.settings import EndpointSettings
from nsb_delays.components.rabbitmq import RabbitMqEndpoint
from nsb_delays.components.recording import record
from nsb_delays.components.section.parsing import parse_rabbitmq_inputs, parse_sqs_inputs
from nsb_delays.components.transports import RabbitMqTransport
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


@contextmanager
def calls_of(*functions: Callable[..., Any]) -> Iterator[list[str]]:
    """The names of ``functions`` called while the block runs, in the caller's thread and the recordings'."""
    codes = {function.__code__: function.__name__ for function in functions}
    called: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code in codes:
            called.append(codes[frame.f_code])

    sys.setprofile(profile)
    profile_the_recording_thread(profile)
    try:
        yield called
    finally:
        sys.setprofile(None)
        profile_the_recording_thread(None)


CHECKS = (
    model_settings.settings_from,
    model_settings.checked_value,
    EndpointSettings.check,
    parse_rabbitmq_inputs,
    parse_sqs_inputs,
)


def test_a_stack_files_plan_flows_down_to_every_component_checked_nothing_again() -> None:
    """The parser checked the stack file (every value, every endpoint); the program hands each transport its section's
    plan and each transport hands each component its settings: no value is checked again on the way down (issue 51:
    each was checked again by the component it reached, through the Args it was turned back into)."""
    raw = {
        "rabbitmq": {"endpoints": ["Sales", {"name": "Billing", "user": {"passwordKey": "billing"}}]},
        "sqs": {"endpoints": ["Sales"]},
        "billing": {"secure": "v1:YmlsbGluZw=="},
    }
    config = parse_stack_config(raw)
    with calls_of(*CHECKS) as called:
        registered = record(lambda: declare(config, {"billing": "secret"}))
    assert len(registered) > 100
    assert called == []


def test_a_transports_inputs_are_checked_once_by_the_sections_parser() -> None:
    """A program's ``RabbitMqTransport``: its section is parsed once, by the section's parser, and nothing below it
    checks a value again."""
    section: Any = {"endpoints": ["Sales", {"name": "Billing", "instance_discriminators": ["blue"]}]}
    with calls_of(parse_rabbitmq_inputs, EndpointSettings.check) as called:
        record(lambda: RabbitMqTransport("rabbitmq", section))
    assert called == ["parse_rabbitmq_inputs"]
