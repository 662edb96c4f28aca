"""Small helpers for the unit tests: record a program and index what it declared."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nsb_delays.components.recording import RecordedResource, record
from nsb_delays.components.resource_types import RABBITMQ_BINDING as BINDING
from nsb_delays.components.resource_types import RABBITMQ_EXCHANGE as EXCHANGE
from nsb_delays.components.resource_types import RABBITMQ_QUEUE as QUEUE
from nsb_delays.components.resource_types import SQS_QUEUE

__all__ = ["BINDING", "EXCHANGE", "QUEUE", "SQS_QUEUE"]


def declared(build: Callable[[], Any]) -> list[RecordedResource]:
    return record(build)


def of_type(resources: list[RecordedResource], type_token: str) -> list[RecordedResource]:
    return [r for r in resources if r.type == type_token]


def exchanges(resources: list[RecordedResource]) -> dict[str, dict[str, Any]]:
    return {r.inputs["name"]: r.settings() for r in of_type(resources, EXCHANGE)}


def queues(resources: list[RecordedResource]) -> dict[str, RecordedResource]:
    return {r.inputs["name"]: r for r in of_type(resources, QUEUE)}


def raw_arguments(resource: RecordedResource) -> dict[str, Any]:
    """The queue arguments exactly as the provider sends them (``argumentsJson``: ints stay ints)."""
    return resource.queue_arguments()


def bindings(resources: list[RecordedResource]) -> set[tuple[str, str, str, str]]:
    return {
        (r.inputs["source"], r.inputs["destination"], r.inputs["destinationType"], r.inputs["routingKey"])
        for r in of_type(resources, BINDING)
    }
