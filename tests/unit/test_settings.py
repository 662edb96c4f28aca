"""Each setting is declared once (``components/model/settings.py``); the stack config's keys, the components' Args
and the multi-language schema derive from that declaration. These tests prove they agree."""

from __future__ import annotations

import dataclasses
import json
import typing
from enum import Enum
from typing import Any

import pytest

from nsb_delays.components import args as component_args
from nsb_delays.components import args_generator
from nsb_delays.components.model import settings as model_settings
from nsb_delays.components.provider import COMPONENTS, NsbDelaysProvider
from nsb_delays.components.section import keys as stack_keys
from nsb_delays.stack.config import ConfigError, parse_stack_config

SPECS = {spec.component: spec for spec in args_generator.COMPONENTS}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(NsbDelaysProvider(COMPONENTS, model_settings.PACKAGE, None, "0.1.0").schema)


def test_the_generated_args_are_up_to_date() -> None:
    """``python -m nsb_delays.components.args_generator`` writes ``components/args.py``; a setting changed without it
    fails here."""
    assert args_generator.ARGS_FILE.read_text(encoding="utf-8") == args_generator.source()


def test_every_component_is_served_and_has_its_args() -> None:
    transports = {
        spec.name.removesuffix("Args") for spec in args_generator.SECTIONS if spec.place in ("rabbitmq", "sqs")
    }
    assert transports == {"RabbitMqTransport", "SqsTransport"}
    assert {component.__name__ for component in COMPONENTS} == set(SPECS) | transports
    for component in COMPONENTS:
        assert typing.get_type_hints(component.__init__)["args"] is getattr(component_args, f"{component.__name__}Args")


def test_a_setting_several_components_take_is_one_declaration() -> None:
    """Every field of a given name is the same ``dataclasses.Field`` in every settings class: declared in one
    place and inherited, never written again."""
    by_name: dict[tuple[str, str], set[int]] = {}
    for settings_type in model_settings.ALL_SETTINGS:
        group = "sqs" if settings_type is model_settings.SqsEndpointSettings else "rabbitmq"
        for item in dataclasses.fields(settings_type):
            by_name.setdefault((group, item.name), set()).add(id(item))
    shared = {name: ids for name, ids in by_name.items() if len(ids) > 1}
    assert not shared, f"declared more than once: {sorted(shared)}"
    assert ("rabbitmq", "vhost") in by_name and ("rabbitmq", "retain_on_delete") in by_name


@pytest.mark.parametrize("component", sorted(SPECS))
def test_the_args_are_the_settings_plus_what_only_pulumi_has(component: str) -> None:
    spec = SPECS[component]
    hints = getattr(component_args, f"{component}Args").__annotations__
    expected = {item.name for item in dataclasses.fields(spec.settings)} | {extra.name for extra in spec.pulumi_inputs}
    assert set(hints) == expected


@pytest.mark.parametrize("component", sorted(SPECS))
def test_the_schema_s_inputs_are_the_declarations(component: str, schema: dict[str, Any]) -> None:
    """Names, required inputs, types, enums and descriptions of the multi-language schema come from the
    declarations: what Pulumi inferred from the generated Args is what the settings say."""
    spec = SPECS[component]
    resource = schema["resources"][f"nsb-delays:index:{component}"]
    inputs = resource["inputProperties"]
    fields = dataclasses.fields(spec.settings)
    assert set(inputs) == {model_settings.camel_case(f.name) for f in fields} | {
        model_settings.camel_case(extra.name) for extra in spec.pulumi_inputs
    }
    required = {model_settings.camel_case(f.name) for f in fields if f.default is dataclasses.MISSING}
    required |= {model_settings.camel_case(e.name) for e in spec.pulumi_inputs if "NotRequired" not in e.annotation}
    assert set(resource.get("requiredInputs", [])) == required
    for item in fields:
        prop = inputs[model_settings.camel_case(item.name)]
        assert prop["description"].startswith(model_settings.declaration(item).doc)
        if item.default is not dataclasses.MISSING:
            assert prop["description"].endswith(f"Default: {model_settings.shown_default(item)}.")
        hint = model_settings.value_type(spec.settings, item.name)
        if isinstance(hint, type) and issubclass(hint, Enum):
            enum = schema["types"][prop["$ref"].removeprefix("#/types/")]
            assert [value["value"] for value in enum["enum"]] == [member.value for member in hint]
        else:
            kind = {"str": "string", "bool": "boolean", "int": "integer"}.get(model_settings.type_name(hint), "array")
            assert prop["type"] == kind


def test_every_stack_config_key_of_a_setting_is_its_declaration() -> None:
    """A key's name, type, allowed values and description are the declaration's; every declaration with a place
    in the stack file has its key there."""
    keys = stack_keys.config_keys()
    declared_places: set[tuple[str, str]] = set()
    for settings_type in model_settings.ALL_SETTINGS:
        for item in dataclasses.fields(settings_type):
            declaration = model_settings.declaration(item)
            for place in declaration.places:
                key = keys[place][model_settings.config_key(item)]
                declared_places.add((place, key.key))
                assert (key.attr, key.doc) == (item.name, declaration.doc)
                assert key.hint == model_settings.value_type(settings_type, item.name)
    shape = {(place, key.key) for place, keys_of in stack_keys.SHAPE_KEYS.items() for key in keys_of}
    assert {(place, key) for place, keys_of in keys.items() for key in keys_of} == declared_places | shape


@pytest.mark.parametrize("place", [p for p in stack_keys.SECTION_PLACES if p != stack_keys.MSMQ])
def test_a_value_outside_a_key_s_type_is_refused_in_the_words_of_the_declaration(place: str) -> None:
    """Each settings key, given a value of the wrong type, is refused naming the key, whichever place it is in."""
    for key in stack_keys.config_keys()[place].values():
        if key.attr in ("endpoints", "user", "password_key", "endpoint") or key.key == "brokerVersion":
            continue
        wrong: Any = 5 if key.type is not int else "five"
        section, _, below = place.partition(".")
        entry = {"name": "Sales", key.key: wrong}
        if below == "":
            raw: dict[str, Any] = {section: {"endpoints": ["Sales"], key.key: wrong}}
        elif below == "endpoints[]":
            raw = {section: {"endpoints": [entry]}}
        else:
            raw = {section: {"endpoints": [{"name": "Sales", "user": {"passwordKey": "pw", key.key: wrong}}]}}
            raw["pw"] = {"secure": "x"}
        with pytest.raises(ConfigError) as refused:
            parse_stack_config(raw)
        expected = "list" if key.type is list else key.type.__name__
        assert f".{key.key}: expected {expected}, got {type(wrong).__name__}" in str(refused.value), key.key
