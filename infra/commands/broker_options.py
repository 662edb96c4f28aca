"""Broker connection options, one set for every command that works on a live RabbitMQ (and SQS).

``--management-url``, ``--username``, ``--password``, ``--ca-cert``, ``--client-cert``, ``--client-key``,
``--insecure`` (what ``verify`` needs), plus ``--amqp-url`` and ``--vhost``; ``--stack`` supplies defaults from
``Pulumi.<stack>.yaml``: the pulumi-rabbitmq provider's
``rabbitmq:endpoint|username|password|cacertFile|clientcertFile|clientkeyFile|insecure`` and the
stack's ``nsb-delays:rabbitmq.vhost``; a Pulumi secret among them is decrypted by the Pulumi CLI
(``pulumi config --show-secrets``, infra/pulumi_engine.py ``read_stack_config``), only when no flag or
variable gave the value. A second broker's options carry a prefix
(``--destination-management-url`` …). First found wins: flag, environment variable (unprefixed options
only: the provider's ``RABBITMQ_*``), the credentials in ``--amqp-url``, stack file. ``migrate`` takes
several ``--amqp-url`` (the nodes of one cluster) and keeps its old spellings (``DEPRECATED``) with a note.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import click
import urllib3

from nsb_delays.brokers.amqp import AmqpNodes, TlsMaterial
from nsb_delays.brokers.delay_scan import BrokerSide
from nsb_delays.brokers.management import ManagementApi
from nsb_delays.brokers.messages import SQS_S3_BUCKET_OPTION
from nsb_delays.brokers.sqs_sender import SqsSettings
from nsb_delays.infra.pulumi_engine import StackConfigUnreadable, read_stack_config
from nsb_delays.stack.config import (
    ConfigError,
    StackConfig,
    find_project_dir,
    load_stack,
    read_stack_yaml,
    stack_file,
    stack_reference,
)
from nsb_delays.stack.redaction import without_password

from .errors import CommandError

AMQP_PORT, AMQPS_PORT = 5672, 5671
ENVIRONMENT = {  # the pulumi-rabbitmq provider's variables
    "management_url": "RABBITMQ_ENDPOINT",
    "username": "RABBITMQ_USERNAME",
    "password": "RABBITMQ_PASSWORD",
    "ca_cert": "RABBITMQ_CACERT",
}
DEPRECATED = {  # an old spelling -> (its parameter, the option that replaces it, that option's parameter)
    "--rabbitmq-url": ("rabbitmq_url", "--amqp-url", "amqp_url"),
    "--rabbitmq-management-url": ("rabbitmq_management_url", "--management-url", "management_url"),
    "--sqs-region": ("sqs_region", "--region", "region"),
}
DEPRECATED_ENVIRONMENT = {"rabbitmq_url": "NSB_RABBITMQ_URL", "rabbitmq_management_url": "NSB_RABBITMQ_MANAGEMENT_URL"}


def _name(prefix: str, option: str) -> str:
    return f"--{prefix}{option}"


def _param(prefix: str, option: str) -> str:
    return f"{prefix}{option}".replace("-", "_")


def _apply(options: list[Callable[..., Any]], command: Callable[..., Any]) -> Callable[..., Any]:
    return functools.reduce(lambda f, option: option(f), reversed(options), command)


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def management_options(
    prefix: str = "", what: str = "the broker", *, amqp: bool = False, from_stack: bool = True
) -> Decorator:
    """The management API's URL, login and TLS; ``prefix`` (e.g. ``"destination-"``) names a second broker;
    ``amqp``: the command also takes ``--amqp-url``, whose login is a default; ``from_stack``: a stack file's
    provider keys are the defaults (not for a command that writes the stack file)."""
    env = not prefix
    user_for = "the management API and AMQP" if amqp else "the management API"
    from_url = "the --amqp-url's, else " if amqp else ""

    def default(key: str, variable: str, url: str = from_url) -> str:
        return f" Default: {url}stack rabbitmq:{key}" if from_stack else f" Default: {variable}"

    def envvar(key: str) -> str | None:
        return ENVIRONMENT.get(key) if env else None

    options = [
        click.option(
            _name(prefix, "management-url"),
            _param(prefix, "management_url"),
            envvar=envvar("management_url"),
            help=f"Management API of {what} (http[s]://host:15672).{default('endpoint', 'RABBITMQ_ENDPOINT', '')}.",
        ),
        click.option(
            _name(prefix, "username"),
            _param(prefix, "username"),
            envvar=envvar("username"),
            help=f"User for {user_for}.{default('username', 'RABBITMQ_USERNAME')}.",
        ),
        click.option(
            _name(prefix, "password"),
            _param(prefix, "password"),
            envvar=envvar("password"),
            help="Its password."
            + (
                default("password", "") + " (a Pulumi secret is read with `pulumi config --show-secrets`)."
                if from_stack
                else " Default: RABBITMQ_PASSWORD."
            ),
        ),
        click.option(
            _name(prefix, "ca-cert"),
            _param(prefix, "ca_cert"),
            envvar=envvar("ca_cert"),
            type=click.Path(exists=True, dir_okay=False),
            help="CA bundle for TLS (https / amqps)." + (" Default: stack rabbitmq:cacertFile." if from_stack else ""),
        ),
        click.option(
            _name(prefix, "client-cert"),
            _param(prefix, "client_cert"),
            type=click.Path(exists=True, dir_okay=False),
            help="Client certificate (PEM)." + (" Default: stack rabbitmq:clientcertFile." if from_stack else ""),
        ),
        click.option(
            _name(prefix, "client-key"),
            _param(prefix, "client_key"),
            type=click.Path(exists=True, dir_okay=False),
            help="Client key (PEM)." + (" Default: stack rabbitmq:clientkeyFile." if from_stack else ""),
        ),
        click.option(
            _name(prefix, "insecure"),
            _param(prefix, "insecure"),
            is_flag=True,
            default=None,
            help="Skip TLS certificate checks" + (" (stack rabbitmq:insecure)." if from_stack else "."),
        ),
    ]
    return lambda command: _apply(options, command)


def broker_options(prefix: str = "", what: str = "the broker", *, nodes: bool = False) -> Decorator:
    """``--stack``, the management options and AMQP's URL and vhost for one broker; ``nodes``: ``--amqp-url``
    may be repeated (or comma-separated), one URL per node of a cluster."""
    amqp_help = (
        "AMQP URL (amqp[s]://[user:pass@]host:port[/vhost]). Default: the management host on 5672 "
        "(amqps on 5671 for an https management URL), the same credentials."
    )
    if nodes:
        amqp_help += (
            " A cluster: repeat it or separate URLs with commas, one per node (same vhost); the run carries on "
            "from the next node when its own goes away."
        )
    options: list[Callable[..., Any]] = [
        click.option(
            _name(prefix, "stack"),
            _param(prefix, "stack"),
            help=f"Stack name (also org/name, org/project/name: Pulumi.<name>.yaml) or a stack YAML path: "
            f"defaults for {what}.",
        ),
        management_options(prefix, what, amqp=True),
        click.option(_name(prefix, "amqp-url"), _param(prefix, "amqp_url"), multiple=nodes, help=amqp_help),
        click.option(
            _name(prefix, "vhost"),
            _param(prefix, "vhost"),
            help="Virtual host. Default: the --amqp-url's, else the stack's nsb-delays:rabbitmq.vhost, else /.",
        ),
    ]
    return lambda command: _apply(options, command)


def deprecated_options(*spellings: str, nodes: bool = False) -> Decorator:
    """Old spellings, still accepted but hidden from ``--help``; ``take_deprecated`` moves them to the new ones.
    ``nodes``: ``--rabbitmq-url`` may be repeated, as the ``--amqp-url`` it stands for."""
    options = [
        click.option(
            old,
            DEPRECATED[old][0],
            envvar=DEPRECATED_ENVIRONMENT.get(DEPRECATED[old][0]),
            multiple=nodes and old == "--rabbitmq-url",
            hidden=True,
        )
        for old in spellings
    ]
    return lambda command: _apply(options, command)


def take_deprecated(values: dict[str, Any]) -> list[str]:
    """Move each old spelling's value to its new option (in place) and return the notes to print; refuse both
    spellings at once (``CommandError``) before anything else runs."""
    notes, both = [], []
    for old, (param, new, new_param) in DEPRECATED.items():
        value = values.pop(param, None)
        if not value:
            continue
        variable = DEPRECATED_ENVIRONMENT.get(param)
        spelled = f"{old} (or {variable})" if variable else old
        if values.get(new_param):
            both.append(f"{spelled} and {new} both given: give {new} only (the old spelling means the same)")
            continue
        values[new_param] = value
        notes.append(f"note: {spelled} is deprecated; use {new} (same meaning)")
    if both:
        raise CommandError(both)
    return notes


def amqp_url_list(given: str | tuple[str, ...] | None) -> list[str]:
    """Every ``--amqp-url`` (repeated, or comma-separated), in order. A comma inside a URL (a password) must be
    percent-encoded (%2C), as pika's URL parsing decodes it."""
    texts = (given,) if isinstance(given, str) else given or ()
    return [url.strip() for text in texts for url in text.split(",") if url.strip()]


def amqp_url_problems(urls: list[str], flag: str = "--amqp-url") -> list[str]:
    """Each URL an amqp(s):// URL with a host and a numeric port; several URLs (the nodes of one cluster)
    name the same vhost, and none twice."""
    problems: list[str] = []
    vhosts: dict[str, str] = {}
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("amqp", "amqps"):
            problems.append(f"{flag} {without_password(url)!r} is not an amqp:// or amqps:// URL")
            continue
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number in 0..65535
        except ValueError:
            problems.append(f"{flag} {without_password(url)!r} has an invalid port (a number, 1-65535)")
            continue
        if not parts.hostname:
            problems.append(f"{flag} {without_password(url)!r} names no host: amqp://user:pass@host:5672/vhost")
            continue
        vhosts[url] = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    if len(set(vhosts.values())) > 1:
        named = ", ".join(f"{without_password(url)!r} -> {vhost!r}" for url, vhost in vhosts.items())
        problems.append(f"{flag}: the nodes of one cluster must name the same vhost, not {named}")
    twice = sorted({without_password(url) for url in urls if urls.count(url) > 1})
    if twice:
        problems.append(f"{flag} given twice: {', '.join(twice)} (give each node once)")
    return problems


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
        click.option(
            "--sqs-s3-key-prefix",
            default="",
            help=f"Key prefix in {SQS_S3_BUCKET_OPTION} (keys: <prefix>/<message id>).",
        ),
    ]
    return _apply(options, command)


@dataclass(frozen=True)
class StackDefaults:
    raw: Mapping[str, Any]
    config: StackConfig | None
    stack: str | None = None  # --stack as given: whose secrets the Pulumi CLI decrypts, when one is needed
    decrypted: dict[str, Any] = field(default_factory=dict, compare=False)  # read once, on the first secret

    def provider(self, key: str, flag: str) -> Any:
        """A ``rabbitmq:``/``aws:`` provider key; a Pulumi secret decrypted by the Pulumi CLI, as
        ``pulumi config --show-secrets`` shows it (``CommandError`` naming the cause and the fix if it cannot)."""
        value = self.raw.get(key)
        if isinstance(value, Mapping) and "secure" in value:
            return self.secret(key, flag)
        return value

    def secret(self, key: str, flag: str) -> Any:
        assert self.stack is not None, "a secret is read only from a --stack file"
        reference = stack_reference(self.stack)
        if not self.decrypted:
            path = stack_file(self.stack).resolve()
            project = find_project_dir(path.parent)
            try:
                if project is None:  # what the Pulumi CLI would say, without running it
                    raise StackConfigUnreadable(
                        f"{path.parent} and its parents have no Pulumi.yaml: keep the stack file in its project"
                    )
                self.decrypted.update(read_stack_config(reference, project, path))
            except StackConfigUnreadable as error:
                raise CommandError(
                    f"stack config {key} is a Pulumi secret, and `pulumi config --show-secrets --stack {reference}` "
                    f"cannot decrypt it: {error}; or pass {flag} (or its environment variable)"
                ) from None
        return self.decrypted.get(key)


def stack_defaults(stack: str | None, flag: str = "--stack") -> StackDefaults:
    if not stack:
        return StackDefaults({}, None)
    try:
        return StackDefaults(read_stack_yaml(stack), load_stack(stack), stack)
    except ConfigError as error:
        raise CommandError(f"{flag} {stack!r}: {error}") from None


@dataclass(frozen=True)
class ResolvedBroker:
    """One broker as the options describe it: its management API and its AMQP nodes (vhost, login, TLS)."""

    management: ManagementApi
    nodes: AmqpNodes

    def side(self) -> BrokerSide:
        return BrokerSide(self.management, self.nodes.parameters(), self.nodes.vhost)


def resolve_rabbitmq(
    values: Mapping[str, Any],
    prefix: str = "",
    connection_name: str = "nsb-delays",
    defaults: StackDefaults | None = None,
) -> ResolvedBroker:
    """The management client and AMQP nodes of the broker ``values`` describe (``CommandError`` if unusable);
    ``defaults``: the stack the command has read already (else ``--stack`` is read here)."""

    def value(option: str) -> Any:
        return values.get(_param(prefix, option))

    stack_flag = _name(prefix, "stack")
    defaults = defaults or stack_defaults(value("stack"), stack_flag)
    urls = amqp_url_list(value("amqp_url"))
    refused = amqp_url_problems(urls, _name(prefix, "amqp-url"))
    if refused:
        raise CommandError(refused)
    in_url = urlsplit(urls[0]) if urls else None
    url_login = (
        unquote(in_url.username) if in_url and in_url.username else None,
        unquote(in_url.password) if in_url and in_url.password else None,
    )
    # An AMQP URL without a login means pika's default, guest: so for the management API too, unless the stack says.
    url_default = ("guest", "guest") if urls else None
    tls = _tls_files(values, prefix, defaults)
    management = resolve_management(values, prefix, defaults, url_login, url_default, tls)
    if not urls:
        endpoint = urlsplit(management.url)
        scheme, port = ("amqps", AMQPS_PORT) if endpoint.scheme == "https" else ("amqp", AMQP_PORT)
        urls = [f"{scheme}://{endpoint.hostname}:{port}/"]
    url_vhost = urlsplit(urls[0]).path[1:]
    stack_vhost = defaults.config.rabbitmq.vhost if defaults.config and defaults.config.rabbitmq else None
    vhost = value("vhost") or (unquote(url_vhost) if url_vhost else None) or stack_vhost or "/"
    nodes = AmqpNodes(
        tuple(urls), vhost, (management.username, management.password), tls_material(tls), connection_name
    )
    return ResolvedBroker(management, nodes)


def resolve_broker(values: Mapping[str, Any], prefix: str = "", connection_name: str = "nsb-delays") -> BrokerSide:
    """``resolve_rabbitmq`` as the moves use it: the management API and the first node's AMQP parameters."""
    return resolve_rabbitmq(values, prefix, connection_name).side()


TlsFiles = tuple[Any, Any, Any, bool]  # CA bundle, client certificate, client key (paths or None), insecure


def _tls_files(values: Mapping[str, Any], prefix: str, defaults: StackDefaults) -> TlsFiles:
    def value(option: str) -> Any:
        return values.get(_param(prefix, option))

    insecure = value("insecure")
    if insecure is None:
        insecure = bool(defaults.provider("rabbitmq:insecure", _name(prefix, "insecure")))
    ca = value("ca_cert") or defaults.provider("rabbitmq:cacertFile", _name(prefix, "ca-cert"))
    cert = value("client_cert") or defaults.provider("rabbitmq:clientcertFile", _name(prefix, "client-cert"))
    key = value("client_key") or defaults.provider("rabbitmq:clientkeyFile", _name(prefix, "client-key"))
    return ca, cert, key, bool(insecure)


def tls_material(files: TlsFiles) -> TlsMaterial:
    ca, cert, key, insecure = files
    try:
        return TlsMaterial.from_files(ca, cert, key, insecure)
    except OSError as error:
        raise CommandError(f"cannot read a TLS file: {error}") from None


def resolve_management(
    values: Mapping[str, Any],
    prefix: str = "",
    defaults: StackDefaults | None = None,
    url_login: tuple[str | None, str | None] = (None, None),
    last_resort: tuple[str, str] | None = None,
    tls: TlsFiles | None = None,
) -> ManagementApi:
    """The management API client; its login from flags or environment, then ``url_login`` (an AMQP URL's), the
    stack, then ``last_resort``; ``tls``: the TLS files when the caller resolved them already."""
    defaults = defaults or stack_defaults(values.get(_param(prefix, "stack")), _name(prefix, "stack"))
    url, user, password = _management_login(values, prefix, defaults, url_login, last_resort)
    ca, cert, key, insecure = tls or _tls_files(values, prefix, defaults)
    if insecure:  # asked for explicitly: one note instead of a warning per request
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        click.echo(f"note: TLS certificate checks are off ({_name(prefix, 'insecure')} / rabbitmq:insecure)", err=True)
    verify_tls: bool | str = False if insecure else (ca or True)
    return ManagementApi(url, user, password, verify_tls, (cert, key) if cert and key else cert)


def _management_login(
    values: Mapping[str, Any],
    prefix: str,
    defaults: StackDefaults,
    url_login: tuple[str | None, str | None],
    last_resort: tuple[str, str] | None,
) -> tuple[str, str, str]:
    """The management API's URL, user and password, each from the first source that has it (``CommandError``
    naming every one missing, or a URL that is not http(s))."""
    url = values.get(_param(prefix, "management_url")) or defaults.provider(
        "rabbitmq:endpoint", _name(prefix, "management-url")
    )
    user = (
        values.get(_param(prefix, "username"))
        or url_login[0]
        or defaults.provider("rabbitmq:username", _name(prefix, "username"))
    )
    password = (
        values.get(_param(prefix, "password"))
        or url_login[1]
        or defaults.provider("rabbitmq:password", _name(prefix, "password"))
    )
    if last_resort and not user and not password:
        user, password = last_resort
    unset = [
        _name(prefix, option)
        for option, given in (("management-url", url), ("username", user), ("password", password))
        if not given
    ]
    if unset:
        where = "flags, RABBITMQ_ENDPOINT/USERNAME/PASSWORD, " if not prefix else "flags or "
        stack_flag = _name(prefix, "stack")
        raise CommandError(
            f"{', '.join(unset)} not given ({where}rabbitmq:endpoint/username/password in the {stack_flag} file)"
        )
    url = str(url)
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise CommandError(f"{_name(prefix, 'management-url')} {url!r} is not an http:// or https:// URL")
    return url, str(user), str(password)


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
