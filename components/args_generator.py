"""Writes ``components/args.py``: each component's ``<Component>Args`` TypedDict, from the settings declared in
``components/model/settings.py`` plus the few inputs only a Pulumi program has (resources' outputs, secrets); and
each transport's, one whole section of the stack config, from that section's keys (``components/section/keys.py``,
themselves from the declarations): the same keys in snake_case, an endpoint entry and its user as types of their own.

Pulumi infers the multi-language schema from a component's ``args`` TypedDict and reads each input's description
from the docstring under it in the source (``pulumi.provider.experimental.analyzer`` ``Analyzer.get_docstring``), so
the Args must be a class in a file: they are generated, never written by hand. Run
``python -m nsb_delays.components.args_generator`` after changing a setting; ``tests/unit/test_settings.py`` fails
while ``components/args.py`` differs from what this writes.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from .model import settings as model_settings
from .section.keys import ConfigKey, config_keys
from .section.parsing import PASSWORD_KEY

ARGS_FILE = Path(__file__).with_name("args.py")


@dataclasses.dataclass(frozen=True)
class PulumiInput:
    """An input of a component that is not a setting: a value only a Pulumi program has."""

    name: str
    annotation: str
    doc: str


@dataclasses.dataclass(frozen=True)
class ComponentArgs:
    component: str
    settings: type[Any]
    pulumi_inputs: tuple[PulumiInput, ...] = ()


_EXCHANGE_NAME = (
    "of the stack's `RabbitMqDelayInfrastructure` (its `{output}` output): the {what} then wait for that exchange "
    "and are replaced with it. Default: the generation's name, with no dependency."
)
COMPONENTS = (
    ComponentArgs("RabbitMqDelayInfrastructure", model_settings.DelayInfrastructureSettings),
    ComponentArgs("RabbitMqSharedQueues", model_settings.SharedQueuesSettings),
    ComponentArgs(
        "RabbitMqEndpoint",
        model_settings.EndpointSettings,
        (
            PulumiInput(
                "delivery_exchange",
                "NotRequired[pulumi.Input[str]]",
                "The delivery exchange "
                + _EXCHANGE_NAME.format(output="deliveryExchange", what="endpoint's delivery bindings"),
            ),
            PulumiInput(
                "parking_exchange",
                "NotRequired[pulumi.Input[str]]",
                "The parking exchange "
                + _EXCHANGE_NAME.format(output="parkingExchange", what="endpoint's alternate-exchange policies"),
            ),
        ),
    ),
    ComponentArgs(
        "RabbitMqEndpointPolicies",
        model_settings.EndpointPoliciesSettings,
        (
            PulumiInput(
                "parking_exchange",
                "NotRequired[pulumi.Input[str]]",
                "The parking exchange " + _EXCHANGE_NAME.format(output="parkingExchange", what="parking policies"),
            ),
        ),
    ),
    ComponentArgs(
        "RabbitMqEndpointUser",
        model_settings.EndpointUserSettings,
        (PulumiInput("password", "pulumi.Input[str]", "Its password: pass a secret (it is stored as one anyway)."),),
    ),
    ComponentArgs("SqsEndpoint", model_settings.SqsEndpointSettings),
)


@dataclasses.dataclass(frozen=True)
class SectionArgs:
    """The inputs of a transport, or of a part of its section (an endpoint entry, its user): the keys a stack file
    sets at ``place``, in snake_case; ``nested`` gives the keys that hold a part their type, ``replaced`` gives the
    keys whose value a program gives in another form (a password itself, not the config key that holds it)."""

    name: str  # the TypedDict's
    place: str
    doc: str
    nested: tuple[tuple[str, str], ...] = ()  # (key, annotation)
    replaced: tuple[tuple[str, PulumiInput], ...] = ()


_PASSWORD = PulumiInput(
    "password",
    "pulumi.Input[str]",
    "Its password: pass a secret (it is stored as one anyway). A stack file names the config key that holds it "
    "(`passwordKey`); a program gives the secret itself.",
)
# Each part before the part that holds it: the generated file is read top to bottom (no postponed annotations).
SECTIONS = (
    SectionArgs(
        "RabbitMqTransportUserArgs",
        model_settings.RABBITMQ_USER,
        "An endpoint's least-privilege RabbitMQ user (`user` of an entry of `RabbitMqTransport`'s `endpoints`).",
        replaced=((PASSWORD_KEY, _PASSWORD),),
    ),
    SectionArgs(
        "RabbitMqTransportEndpointArgs",
        model_settings.RABBITMQ_ENDPOINT,
        "An endpoint of `RabbitMqTransport` (an entry of its `endpoints`); in Python also its name alone.",
        nested=(("user", "NotRequired[RabbitMqTransportUserArgs]"),),
    ),
    SectionArgs(
        "RabbitMqTransportArgs",
        model_settings.RABBITMQ,
        "The inputs of ``RabbitMqTransport``: the `nsb-delays:rabbitmq` section of a stack file, in snake_case.",
        nested=(("endpoints", "NotRequired[list[RabbitMqTransportEndpointArgs]]"),),
    ),
    SectionArgs(
        "SqsTransportEndpointArgs",
        model_settings.SQS_ENDPOINT,
        "An endpoint of `SqsTransport` (an entry of its `endpoints`); in Python also its name alone.",
    ),
    SectionArgs(
        "SqsTransportArgs",
        model_settings.SQS,
        "The inputs of ``SqsTransport``: the `nsb-delays:sqs` section of a stack file, in snake_case.",
        nested=(("endpoints", "NotRequired[list[SqsTransportEndpointArgs]]"),),
    ),
)
NO_DEFAULT = ("required", "none")  # what the configuration reference shows for a key without a default


def key_line(key: ConfigKey, nested: dict[str, str]) -> list[str]:
    """One key of a section as an input: its name in snake_case, its type, its description and default."""
    name = model_settings.snake_case(key.key)
    if model_settings.camel_case(name) != key.key:
        raise ValueError(f"{key.key!r} is not the camelCase of a Python name: the Args could not be read back")
    required = key.default == "required"
    hint = nested.get(key.key) or (annotation(key.hint) if required else f"NotRequired[{annotation(key.hint)}]")
    default = "" if key.default in NO_DEFAULT else f" Default: {key.default}."
    return [f"    {name}: {hint}", *docstring(key.doc + default)]


def section_lines(spec: SectionArgs) -> list[str]:
    """The keys of the place, required ones first, in the order the configuration reference lists them."""
    nested, replaced = dict(spec.nested), dict(spec.replaced)
    keys = sorted(config_keys()[spec.place].values(), key=lambda key: key.default != "required")
    lines = ["", "", f"class {spec.name}(TypedDict):", f'    """{spec.doc}"""', ""]
    for key in keys:
        extra = replaced.get(key.key)
        lines += [f"    {extra.name}: {extra.annotation}", *docstring(extra.doc)] if extra else key_line(key, nested)
    return lines


HEADER = '''"""Each component's inputs, ``<Component>Args``: generated from the settings declared in
``components/model/settings.py`` by ``python -m nsb_delays.components.args_generator``; do not edit.

Pulumi's convention for Python components, ``Component(name, args: ComponentArgs, opts)``: Python programs pass
these dicts, and the component provider serves the same classes to every other language.
"""'''


def docstring(text: str) -> list[str]:
    """An input's docstring on one line: Pulumi's analyzer takes it verbatim as the schema's description, so a
    wrapped one would carry its line breaks and indentation into every language's docs (pyproject exempts the
    generated file from the line length)."""
    return [f'    """{text}"""']


def annotation(hint: Any) -> str:
    """A setting's type as its input: a list for a tuple, a version as the string it travels as (parsed where the
    settings take it)."""
    if typing.get_origin(hint) is tuple:
        return f"list[{annotation(typing.get_args(hint)[0])}]"
    if model_settings.is_version(hint):
        return "str"
    return str(hint.__name__)


def settings_lines(spec: ComponentArgs) -> list[str]:
    """The settings, required ones first, each with its docstring and default."""
    fields = sorted(dataclasses.fields(spec.settings), key=lambda f: f.default is not dataclasses.MISSING)
    lines = []
    for item in fields:
        hint = annotation(model_settings.value_type(spec.settings, item.name))
        required = item.default is dataclasses.MISSING
        default = "" if required else f" Default: {model_settings.shown_default(item)}."
        doc = model_settings.declaration(item).doc + default
        lines += [f"    {item.name}: {hint if required else f'NotRequired[{hint}]'}", *docstring(doc)]
    return lines


def source() -> str:
    hints = [model_settings.value_type(spec.settings, item.name) for spec in COMPONENTS
             for item in dataclasses.fields(spec.settings)]  # fmt: skip
    hints += [key.hint for spec in SECTIONS for key in config_keys()[spec.place].values()]
    enums: dict[str, set[str]] = {}  # each enum imported from the module that defines it
    for hint in hints:
        if isinstance(hint, type) and issubclass(hint, Enum):
            enums.setdefault(hint.__module__.removeprefix("nsb_delays.components"), set()).add(hint.__name__)
    parts = [
        HEADER,
        "",
        "# Generated: no `from __future__ import annotations` (Pulumi's analyzer reads the annotations as types).",
        "from typing import NotRequired, TypedDict",
        "",
        "import pulumi",
        "",
        *(f"from {module} import {', '.join(sorted(names))}" for module, names in sorted(enums.items())),
    ]
    for spec in COMPONENTS:
        parts += ["", "", f"class {spec.component}Args(TypedDict):", f'    """The inputs of ``{spec.component}``."""']
        parts.append("")
        parts += settings_lines(spec)
        for extra in spec.pulumi_inputs:
            parts += [f"    {extra.name}: {extra.annotation}", *docstring(extra.doc)]
    for section in SECTIONS:
        parts += section_lines(section)
    return "\n".join(parts) + "\n"


def main() -> None:
    ARGS_FILE.write_text(source(), encoding="utf-8")
    print(f"wrote {ARGS_FILE}", file=sys.stderr)


if __name__ == "__main__":
    main()
