"""A component's ``args`` as its settings: every input checked against its declaration before anything is declared,
and a refusal shown as Pulumi shows a bad input (the input's name and the rule, no Python traceback)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

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


class Checked(dict[str, Any]):
    """A component's args as they are handed to it already checked: a transport's by the program (its stack file's
    plan, checked by the stack config's parser), a lower component's by its transport (each part of the plan it
    declares). The component takes ``settings`` as they are and checks nothing again. The mapping holds, under their
    Args' keys, only the Pulumi inputs no settings carry (another resource's output, a secret); ``shared`` is what the
    transport gives each of its children alike (the vhost's policy order, its children's objects by name)."""

    def __init__(self, settings: object, inputs: Mapping[str, Any] | None = None, shared: Any = None) -> None:
        super().__init__(inputs or {})
        self.settings = settings
        self.shared = shared


A = TypeVar("A", bound=Mapping[str, Any])


def handed(args_type: type[A], settings: object, inputs: Mapping[str, Any] | None = None, shared: Any = None) -> A:
    """``Checked`` args, given where a component takes its ``<Component>Args`` (a dict at run time, as they are)."""
    return cast(A, Checked(settings, inputs, shared))


def settings_of_args(
    settings_type: type[S],
    component: str,
    name: str,
    args: Mapping[str, Any],
    pulumi_inputs: tuple[str, ...] = (),
    check: Callable[[S], object] | None = None,
) -> S:
    """``args`` (the component's ``<Component>Args``) as ``settings_type``, checked: an input the component does not
    take is refused by name, as a type checker would (a Python program's typo is not silently ignored), each value
    against its declaration, then ``check`` (what the declarations' types do not say). Args handed ``Checked`` are
    taken as they are."""
    if isinstance(args, Checked):
        if not isinstance(args.settings, settings_type):
            raise TypeError(f"{component} {name!r} was handed {type(args.settings).__name__}, not {settings_type}")
        return args.settings
    known = {*model_settings.fields_of(settings_type), *pulumi_inputs}
    with refusals_as_input_errors(component, name):
        unknown = sorted(set(args) - known)
        if unknown:
            raise model_settings.SettingsRefused(
                [(key, f"unknown input (known: {', '.join(sorted(map(model_settings.camel_case, known)))})")
                 for key in unknown]
            )  # fmt: skip
        settings = model_settings.settings_from(settings_type, wire_values(settings_type, args))
        if check is not None:
            check(settings)
        return settings


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
