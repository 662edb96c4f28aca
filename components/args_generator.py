"""Writes ``components/args.py``: each component's ``<Component>Args`` TypedDict, from the settings declared in
``components/model/settings.py`` plus the few inputs only a Pulumi program has (resources' outputs, secrets).

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
    if typing.get_origin(hint) is tuple:
        return f"list[{annotation(typing.get_args(hint)[0])}]"
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
    enums = sorted(
        {
            hint.__name__
            for spec in COMPONENTS
            for item in dataclasses.fields(spec.settings)
            if isinstance(hint := model_settings.value_type(spec.settings, item.name), type) and issubclass(hint, Enum)
        }
    )
    parts = [
        HEADER,
        "",
        "# Generated: no `from __future__ import annotations` (Pulumi's analyzer reads the annotations as types).",
        "from typing import NotRequired, TypedDict",
        "",
        "import pulumi",
        "",
        f"from .model.rabbitmq import {', '.join(enums)}",
    ]
    for spec in COMPONENTS:
        parts += ["", "", f"class {spec.component}Args(TypedDict):", f'    """The inputs of ``{spec.component}``."""']
        parts.append("")
        parts += settings_lines(spec)
        for extra in spec.pulumi_inputs:
            parts += [f"    {extra.name}: {extra.annotation}", *docstring(extra.doc)]
    return "\n".join(parts) + "\n"


def main() -> None:
    ARGS_FILE.write_text(source(), encoding="utf-8")
    print(f"wrote {ARGS_FILE}", file=sys.stderr)


if __name__ == "__main__":
    main()
