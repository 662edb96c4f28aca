"""Versions are parsed once, where they enter (a stack file, a component's Args, another language through the
provider, a broker's report), into values compared as ``(major, minor, patch)`` and shown as they were written."""

from __future__ import annotations

import copy
import pickle
from typing import Any, NotRequired

import pytest

from nsb_delays.components import args as component_args
from nsb_delays.components.model.rabbitmq.endpoint_start import NEWEST_TRANSPORT_VERSION, TransportVersion
from nsb_delays.components.model.rabbitmq.versions import (
    DEFAULT_BROKER_VERSION,
    BrokerVersion,
    parse_reported_broker_version,
)
from nsb_delays.components.model.settings import EndpointSettings, SettingsRefused, settings_from
from nsb_delays.stack.config import parse_stack_config


@pytest.mark.parametrize(
    ("version", "text", "numbers"),
    [
        (BrokerVersion("4.3"), "4.3", (4, 3, 0)),
        (BrokerVersion("3.10.0"), "3.10.0", (3, 10, 0)),
        (parse_reported_broker_version("3.13.0-rc.2"), "3.13.0-rc.2", (3, 13, 0)),
        (TransportVersion("11.2.1"), "11.2.1", (11, 2, 1)),
    ],
)
def test_a_version_is_shown_as_written_and_compared_as_numbers(
    version: Any, text: str, numbers: tuple[int, ...]
) -> None:
    assert str(version) == text and f"{version}" == text
    assert version == numbers and tuple(version) == numbers
    assert version >= (3, 10, 0) and version[:2] == numbers[:2]
    for again in (copy.deepcopy(version), pickle.loads(pickle.dumps(version))):
        assert type(again) is type(version) and str(again) == text and again == version


def test_a_broker_version_without_a_patch_names_its_series() -> None:
    """``"4.3"`` is any 4.3.x (``policy_pattern_refusal`` holds it to 4.3.3's bound); ``"4.3.0"`` is one release."""
    assert BrokerVersion("4.3").series and not BrokerVersion("4.3.0").series
    assert not parse_reported_broker_version("4.3.6").series
    assert BrokerVersion("4.3") == BrokerVersion("4.3.0")  # the same numbers


def test_the_settings_take_the_text_of_every_origin_as_the_value() -> None:
    endpoint = settings_from(
        EndpointSettings, {"endpoint": "Sales", "broker_version": "3.12", "transport_version": "10.1.6"}
    )
    assert isinstance(endpoint.broker_version, BrokerVersion) and str(endpoint.broker_version) == "3.12"
    assert isinstance(endpoint.transport_version, TransportVersion) and endpoint.transport_version == (10, 1, 6)
    defaults = settings_from(EndpointSettings, {"endpoint": "Sales"})
    assert defaults.broker_version is DEFAULT_BROKER_VERSION and defaults.transport_version == NEWEST_TRANSPORT_VERSION
    stack = parse_stack_config({"rabbitmq": {"brokerVersion": "4.0", "endpoints": ["Sales"]}}).rabbitmq
    assert stack is not None and isinstance(stack.infrastructure.broker_version, BrokerVersion)
    with pytest.raises(SettingsRefused, match=r"transportVersion: '10\.1' is not an NServiceBus\.RabbitMQ version"):
        settings_from(EndpointSettings, {"endpoint": "Sales", "transport_version": "10.1"})
    with pytest.raises(SettingsRefused, match=r"brokerVersion: expected str, got float"):
        settings_from(EndpointSettings, {"endpoint": "Sales", "broker_version": 4.3})


def test_the_args_and_the_schema_keep_a_version_a_string() -> None:
    """The multi-language schema is inferred from the Args: a version travels as a string."""
    hints = component_args.RabbitMqEndpointArgs.__annotations__
    assert hints["broker_version"] == hints["transport_version"] == NotRequired[str]
