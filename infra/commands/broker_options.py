"""Broker connection options shared by the commands that work on a live RabbitMQ (and SQS).

The options are named as ``verify`` names them (``--management-url``, ``--username``, ``--password``,
``--ca-cert``, ``--client-cert``, ``--client-key``, ``--insecure``) plus ``--amqp-url`` and ``--vhost``;
``--stack`` supplies defaults from ``Pulumi.<stack>.yaml``: the pulumi-rabbitmq provider's
``rabbitmq:endpoint|username|password|cacertFile|clientcertFile|clientkeyFile|insecure`` and the
stack's ``nsb-delays:rabbitmq.vhost``. A second broker's options carry a prefix
(``--destination-management-url`` …). First found wins: flag, environment variable (unprefixed options
only: the provider's ``RABBITMQ_*``), stack file.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import click
import pika
import urllib3

from nsb_delays.brokers.delay_mover import BrokerSide
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.sqs_sender import SqsSettings
from nsb_delays.stack.config import ConfigError, StackConfig, load_stack, read_stack_yaml
from nsb_delays.stack.errors import CommandError

AMQP_PORT, AMQPS_PORT = 5672, 5671
ENVIRONMENT = {  # the pulumi-rabbitmq provider's variables, as `verify` reads them
    "management_url": "RABBITMQ_ENDPOINT",
    "username": "RABBITMQ_USERNAME",
    "password": "RABBITMQ_PASSWORD",
    "ca_cert": "RABBITMQ_CACERT",
}


def _name(prefix: str, option: str) -> str:
    return f"--{prefix}{option}"


def _param(prefix: str, option: str) -> str:
    return f"{prefix}{option}".replace("-", "_")


def broker_options(prefix: str = "", what: str = "the broker") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Connection options for one broker; ``prefix`` (e.g. ``"destination-"``) names a second one."""
    env = not prefix

    def envvar(key: str) -> str | None:
        return ENVIRONMENT.get(key) if env else None

    options = [
        click.option(
            _name(prefix, "stack"),
            _param(prefix, "stack"),
            help=f"Stack name (Pulumi.<stack>.yaml) or a stack YAML path: defaults for {what}.",
        ),
        click.option(
            _name(prefix, "management-url"),
            _param(prefix, "management_url"),
            envvar=envvar("management_url"),
            help=f"Management API of {what} (http[s]://host:15672). Default: stack rabbitmq:endpoint.",
        ),
        click.option(_name(prefix, "username"), _param(prefix, "username"), envvar=envvar("username")),
        click.option(_name(prefix, "password"), _param(prefix, "password"), envvar=envvar("password")),
        click.option(
            _name(prefix, "amqp-url"),
            _param(prefix, "amqp_url"),
            help="AMQP URL (amqp[s]://user:pass@host:port/vhost). Default: the management host on 5672 "
            "(amqps on 5671 for an https management URL), the same credentials.",
        ),
        click.option(
            _name(prefix, "vhost"),
            _param(prefix, "vhost"),
            help="Virtual host. Default: the --amqp-url's, else the stack's nsb-delays:rabbitmq.vhost, else /.",
        ),
        click.option(
            _name(prefix, "ca-cert"),
            _param(prefix, "ca_cert"),
            envvar=envvar("ca_cert"),
            type=click.Path(exists=True, dir_okay=False),
            help="CA bundle for TLS (https / amqps). Default: stack rabbitmq:cacertFile.",
        ),
        click.option(
            _name(prefix, "client-cert"),
            _param(prefix, "client_cert"),
            type=click.Path(exists=True, dir_okay=False),
            help="Client certificate (PEM). Default: stack rabbitmq:clientcertFile.",
        ),
        click.option(
            _name(prefix, "client-key"),
            _param(prefix, "client_key"),
            type=click.Path(exists=True, dir_okay=False),
            help="Client key (PEM). Default: stack rabbitmq:clientkeyFile.",
        ),
        click.option(
            _name(prefix, "insecure"),
            _param(prefix, "insecure"),
            is_flag=True,
            default=None,
            help="Skip TLS certificate checks (stack rabbitmq:insecure).",
        ),
    ]
    return lambda command: functools.reduce(lambda f, option: option(f), reversed(options), command)


def sqs_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """SQS settings (the transport's QueueNamePrefix, S3 for large bodies), as the timeout migration names them."""
    options = [
        click.option("--sqs-endpoint-url", envvar="AWS_ENDPOINT_URL_SQS", help="SQS endpoint, e.g. an emulator."),
        click.option("--region", envvar="AWS_REGION", help="AWS region. Default: stack aws:region, else us-east-1."),
        click.option("--sqs-prefix", help="QueueNamePrefix of the SQS transport. Default: stack sqs.queueNamePrefix."),
        click.option(
            "--sqs-s3-bucket",
            help="S3 bucket for bodies over the SQS limit (S3BucketForLargeMessages); without it they are poison.",
        ),
        click.option("--sqs-s3-key-prefix", default="", help="Key prefix in --sqs-s3-bucket."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), command)


@dataclass(frozen=True)
class StackDefaults:
    raw: Mapping[str, Any]
    config: StackConfig | None

    def provider(self, key: str, flag: str) -> Any:
        """A ``rabbitmq:``/``aws:`` provider key; Pulumi secrets are encrypted and cannot be read here."""
        value = self.raw.get(key)
        if isinstance(value, Mapping) and "secure" in value:
            raise CommandError(f"stack config {key} is a Pulumi secret (encrypted); pass {flag} or its env variable")
        return value


def stack_defaults(stack: str | None, flag: str = "--stack") -> StackDefaults:
    if not stack:
        return StackDefaults({}, None)
    try:
        return StackDefaults(read_stack_yaml(stack), load_stack(stack))
    except ConfigError as error:
        raise CommandError(f"{flag} {stack!r}: {error}") from None


def _tls_context(ca: str | None, client_cert: str | None, client_key: str | None, insecure: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if client_cert:
        context.load_cert_chain(client_cert, client_key)
    return context


def resolve_broker(values: Mapping[str, Any], prefix: str = "", connection_name: str = "nsb-delays") -> BrokerSide:
    """The management client and AMQP parameters of the broker ``values`` describe (``CommandError`` if unusable)."""

    def value(option: str) -> Any:
        return values.get(_param(prefix, option))

    stack_flag = _name(prefix, "stack")
    defaults = stack_defaults(value("stack"), stack_flag)
    url = value("management_url") or defaults.provider("rabbitmq:endpoint", _name(prefix, "management-url"))
    user = value("username") or defaults.provider("rabbitmq:username", _name(prefix, "username"))
    password = value("password") or defaults.provider("rabbitmq:password", _name(prefix, "password"))
    unset = [
        _name(prefix, option)
        for option, given in (("management-url", url), ("username", user), ("password", password))
        if not given
    ]
    if unset:
        where = "flags, RABBITMQ_ENDPOINT/USERNAME/PASSWORD, " if not prefix else "flags or "
        raise CommandError(
            f"{', '.join(unset)} not given ({where}rabbitmq:endpoint/username/password in the {stack_flag} file)"
        )
    url = str(url)
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise CommandError(f"{_name(prefix, 'management-url')} {url!r} is not an http:// or https:// URL")
    insecure = value("insecure")
    if insecure is None:
        insecure = bool(defaults.provider("rabbitmq:insecure", _name(prefix, "insecure")))
    ca = value("ca_cert") or defaults.provider("rabbitmq:cacertFile", _name(prefix, "ca-cert"))
    cert = value("client_cert") or defaults.provider("rabbitmq:clientcertFile", _name(prefix, "client-cert"))
    key = value("client_key") or defaults.provider("rabbitmq:clientkeyFile", _name(prefix, "client-key"))
    verify_tls: bool | str = False if insecure else (ca or True)
    if insecure:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    api = ManagementApi(url, str(user), str(password), verify_tls, (cert, key) if cert and key else cert)

    amqp_url = value("amqp_url")
    if amqp_url:
        parts = urlsplit(amqp_url)
        if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
            raise CommandError(f"{_name(prefix, 'amqp-url')} {amqp_url!r} is not an amqp:// or amqps:// URL")
        url_vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else None
    else:
        management = urlsplit(url)
        scheme, port = ("amqps", AMQPS_PORT) if management.scheme == "https" else ("amqp", AMQP_PORT)
        amqp_url = (
            f"{scheme}://{quote(str(user), safe='')}:{quote(str(password), safe='')}@{management.hostname}:{port}/"
        )
        url_vhost = None
    stack_vhost = defaults.config.rabbitmq.vhost if defaults.config and defaults.config.rabbitmq else None
    vhost = value("vhost") or url_vhost or stack_vhost or "/"
    parameters = pika.URLParameters(amqp_url)
    if urlsplit(amqp_url).username is None:  # no credentials in the URL: the management ones
        parameters.credentials = pika.PlainCredentials(str(user), str(password))
    parameters.virtual_host = vhost
    parameters.client_properties = {"connection_name": connection_name}
    if urlsplit(amqp_url).scheme == "amqps":
        host = urlsplit(amqp_url).hostname or ""
        parameters.ssl_options = pika.SSLOptions(_tls_context(ca, cert, key, bool(insecure)), host)
    return BrokerSide(api, parameters, vhost)


def resolve_sqs(values: Mapping[str, Any], stack: str | None, stack_flag: str = "--stack") -> SqsSettings:
    """SQS settings from flags, then the stack (``aws:region``, ``nsb-delays:sqs.queueNamePrefix``)."""
    defaults = stack_defaults(stack, stack_flag)
    region = values.get("region") or defaults.provider("aws:region", "--region") or "us-east-1"
    prefix = values.get("sqs_prefix")
    if prefix is None:
        prefix = defaults.config.sqs.queue_name_prefix if defaults.config and defaults.config.sqs else ""
    return SqsSettings(
        region=str(region),
        endpoint_url=values.get("sqs_endpoint_url"),
        queue_name_prefix=prefix,
        s3_bucket=values.get("sqs_s3_bucket") or None,
        s3_key_prefix=values.get("sqs_s3_key_prefix") or "",
    )
