"""Refuse a Pulumi program whose ``broker_version`` does not name the broker it targets, before it declares anything.

The components declare what a broker of ``broker_version`` wants (``components.model``: NServiceBus's delivery-limit
policies from 4.0, ``x-queue-type`` on classic queues from 4.0). Declared for the wrong broker, a part of it is refused
half-way through ``pulumi up`` (measured: RabbitMQ 3.10 refuses the delivery-limit policies of a stack that says
``"4.0"`` after 130 other objects were created). So a program asks the broker first: ``check_broker_version`` reads the
pulumi-rabbitmq provider's settings, as the provider reads them, and ``GET /api/overview``; a mismatch ends the program
with ``pulumi.RunError`` (the message alone, no traceback), before any resource is registered, in ``preview`` and
``up`` alike. The project's program calls it; a program of your own calls it before its first component.
"""

from __future__ import annotations

import os

import pulumi

from nsb_delays.brokers.management import ManagementApi, ManagementError
from nsb_delays.components.model.rabbitmq.versions import (
    BrokerVersion,
    broker_version_mismatch,
    parse_reported_broker_version,
)

# How long the check waits for the broker: a preview with an unreachable endpoint only warns, and must not hang.
CHECK_TIMEOUT_SECONDS = 10


def _provider_setting(key: str, variable: str) -> str | None:
    """A pulumi-rabbitmq provider setting as the provider takes it: the stack's ``rabbitmq:<key>``, else its
    environment variable (cyrilgdn/terraform-provider-rabbitmq ``rabbitmq/provider.go``, ``Provider``:
    ``schema.EnvDefaultFunc("RABBITMQ_ENDPOINT", …)`` and the others). A secret is read as its value."""
    return pulumi.Config("rabbitmq").get(key) or os.environ.get(variable) or None


def provider_management_api() -> ManagementApi | None:
    """The management API the default pulumi-rabbitmq provider talks to, with its credentials and TLS settings
    (``providerConfigure`` in the same file); None when no endpoint is set."""
    endpoint = _provider_setting("endpoint", "RABBITMQ_ENDPOINT")
    if endpoint is None:
        return None
    insecure = (_provider_setting("insecure", "RABBITMQ_INSECURE") or "").lower() in ("1", "true")
    ca_file = _provider_setting("cacertFile", "RABBITMQ_CACERT")
    cert = _provider_setting("clientcertFile", "RABBITMQ_CLIENTCERT")
    key = _provider_setting("clientkeyFile", "RABBITMQ_CLIENTKEY")
    api = ManagementApi(
        endpoint,
        _provider_setting("username", "RABBITMQ_USERNAME") or "",
        _provider_setting("password", "RABBITMQ_PASSWORD") or "",
        verify_tls=False if insecure else (ca_file or True),
        client_cert=(cert, key) if cert and key else None,
        timeout=CHECK_TIMEOUT_SECONDS,
    )
    proxy = _provider_setting("proxy", "RABBITMQ_PROXY")
    if proxy:
        api.session.proxies = {"http": proxy, "https": proxy}
    return api


def check_broker_version(broker_version: BrokerVersion | str, setting: str = "broker_version") -> None:
    """End the program, before it declares anything, when the provider's broker runs another RabbitMQ release than
    ``broker_version`` names (``rmq.broker_version_mismatch``: the same ``MAJOR.MINOR``). ``setting`` is how the
    message names the value to fix. A program of your own gives the text of its components' ``broker_version``: it is
    parsed here, where it enters.

    When the broker cannot be asked (no endpoint, unreachable, refused credentials) it warns and goes on: a preview
    needs no broker (the provider calls it only to change something), and an ``up`` then fails at the provider's
    first call, before any change."""
    given = repr(str(broker_version))
    api = provider_management_api()
    if api is None:
        pulumi.log.warn(f"{setting} {given} is not checked against the broker: rabbitmq:endpoint is not set")
        return
    try:
        stack = broker_version if isinstance(broker_version, BrokerVersion) else BrokerVersion(broker_version)
        reported = parse_reported_broker_version(str(api.overview().get("rabbitmq_version", "")))
    except (ManagementError, ValueError) as error:
        pulumi.log.warn(f"{setting} {given} is not checked against the broker: {error}")
        return
    mismatch = broker_version_mismatch(stack, reported)
    if mismatch is not None:
        raise pulumi.RunError(
            f"{setting} is {given}, but the broker at {api.url} runs RabbitMQ {reported}: {mismatch}. "
            f"{setting} names the broker's MAJOR.MINOR: what is declared for another release can be refused half-way "
            "through an update. Nothing was changed."
        )
