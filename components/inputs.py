"""A component's ``args`` as its settings: every input checked against its declaration before anything is declared,
and a refusal shown as Pulumi shows a bad input (the input's name and the rule, no Python traceback)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import pulumi

from .model import settings as model_settings

S = TypeVar("S")


class InputsRefused(pulumi.InputPropertiesError, ValueError):
    """A component's refusal of its inputs: the engine shows it as bad inputs (``pulumi.provider.server``
    ``Construct`` reports an ``InputPropertiesError`` as invalid arguments, with each input's path and reason), and a
    Python program may catch it as the ``ValueError`` the model raised."""

    def __init__(self, message: str, errors: list[pulumi.InputPropertyErrorDetails] | None = None) -> None:
        # Always a list, if an empty one: pulumi.provider.server ``create_grpc_invalid_properties_status`` gives the
        # status its trailing metadata only for a list, and grpc's ``abort_with_status`` reads it (without: "'Status'
        # object has no attribute 'trailing_metadata'", an unexpected error instead of the refusal).
        super().__init__(message, errors if errors is not None else [])


@contextmanager
def refusals_as_input_errors(component: str, name: str) -> Iterator[None]:
    """The model's refusal of an input (a ``ValueError`` naming it and the rule) as the engine shows a bad input:
    a few lines, no Python traceback (anything but an input error is reported as an unexpected exception with its
    stack)."""
    try:
        yield
    except model_settings.SettingsRefused as refused:
        errors: list[pulumi.InputPropertyErrorDetails] = [
            {"property_path": model_settings.camel_case(key), "reason": problem} for key, problem in refused.problems
        ]
        raise InputsRefused(f"{component} {name!r}: {refused}", errors) from None
    except ValueError as error:
        raise InputsRefused(f"{component} {name!r}: {error}") from None


def settings_of_args(
    settings_type: type[S], component: str, name: str, args: Mapping[str, Any], pulumi_inputs: tuple[str, ...] = ()
) -> S:
    """``args`` (the component's ``<Component>Args``) as ``settings_type``; an input the component does not take is
    refused by name, as a type checker would (a Python program's typo is not silently ignored)."""
    known = {*model_settings.fields_of(settings_type), *pulumi_inputs}
    with refusals_as_input_errors(component, name):
        unknown = sorted(set(args) - known)
        if unknown:
            raise model_settings.SettingsRefused(
                [(key, f"unknown input (known: {', '.join(sorted(map(model_settings.camel_case, known)))})")
                 for key in unknown]
            )  # fmt: skip
        return model_settings.settings_from(settings_type, wire_values(settings_type, args))


def wire_values(settings_type: type[Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` as they arrive from another language, made what the settings declare where Pulumi's host does not.

    Whole numbers arrive as floats: inputs travel as a protobuf ``Struct``, whose numbers are all doubles, and the
    component host (``pulumi.provider.experimental.component`` ``ComponentProvider.map_input_properties``) converts an
    integer input and then hands on the value it received. A number where a string belongs is refused with the
    reason: Pulumi YAML turns every config value that parses as a number into one, whatever the config's declared
    type (pulumi/pulumi-yaml ``pkg/server/server.go`` ``Run``), so ``"3.10"`` reaches a component as ``3.1``.
    """
    fields = model_settings.fields_of(settings_type)
    values = dict(args)
    for key, value in args.items():
        if key not in fields or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        hint = model_settings.value_type(settings_type, key)
        values[key] = model_settings.from_wire(hint, value)
        if model_settings.type_name(hint) == "str":
            raise model_settings.SettingsRefused(
                [(key, "a number where a string belongs. Pulumi YAML turns a config value that looks like a number "
                       'into one: write the value in the program ("3.10"), or in a form that is not a number (a broker '
                       'version with its patch level: "3.10.0")')]
            )  # fmt: skip
    return values
