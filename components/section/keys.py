"""The stack config's keys: each setting's key, type, allowed values, default and description come from its
declaration (``components/model/settings.py``); only the keys that give the config its shape (``endpoints``,
``user``, ``passwordKey``, the MSMQ section's) are declared here. The parser (``stack/config.py``) checks a section
against them and the configuration reference is generated from them, so neither can drift from the components.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from nsb_delays.components.model import msmq
from nsb_delays.components.model import settings as model_settings
from nsb_delays.components.model.settings import (
    ALL_SETTINGS,
    PACKAGE,
    RABBITMQ,
    RABBITMQ_ENDPOINT,
    RABBITMQ_USER,
    SQS,
    SQS_ENDPOINT,
    camel_case,
)

NAMESPACE = PACKAGE  # the stack config's: nsb-delays:rabbitmq
MSMQ = "msmq"
TOPOLOGY_OPERATOR = "topologyOperator"  # read by `render --format topology-operator` only
SECTIONS = (RABBITMQ, SQS, MSMQ, TOPOLOGY_OPERATOR)
DELIVERY_LIMIT_POLICIES_KEY = camel_case("delivery_limit_policies")
BROKER_VERSION_KEY = camel_case("broker_version")
SECTION_PLACES = (RABBITMQ, RABBITMQ_ENDPOINT, RABBITMQ_USER, SQS, SQS_ENDPOINT, MSMQ, TOPOLOGY_OPERATOR)


@dataclass(frozen=True)
class ConfigKey:
    """One key of one place of the stack config."""

    key: str
    attr: str  # the field it fills
    hint: Any  # a settings field's type, or the YAML type of a shape key
    doc: str
    default: str  # as the configuration reference shows it

    @property
    def type(self) -> Any:
        """The YAML type: str, bool, int, list or Mapping."""
        if (isinstance(self.hint, type) and issubclass(self.hint, Enum)) or model_settings.is_version(self.hint):
            return str
        return list if model_settings.type_name(self.hint) == "list" else self.hint

    @property
    def allowed(self) -> tuple[str, ...] | None:
        if isinstance(self.hint, type) and issubclass(self.hint, Enum):
            return tuple(member.value for member in self.hint)
        return None

    def check(self, value: Any) -> Any:
        """The value as the settings take it, or ValueError in the words every origin shares."""
        if self.hint is Mapping:
            if not isinstance(value, Mapping):
                raise ValueError(f"expected Mapping, got {type(value).__name__}")
            return value
        return model_settings.checked_value(self.hint, value)


def _setting_keys(place: str) -> dict[str, ConfigKey]:
    """The settings a stack file sets at ``place``, from their declarations (each once, whichever component)."""
    keys: dict[str, ConfigKey] = {}
    for settings_type in ALL_SETTINGS:
        for item in dataclasses.fields(settings_type):
            declared = model_settings.declaration(item)
            key = model_settings.config_key(item)
            if place not in declared.places or key in keys:
                continue
            section = declared.places[0]
            if place != section:
                default = f"the section's `{key}`"
            elif item.default is dataclasses.MISSING and not declared.default_text:
                default = "required"
            else:
                default = model_settings.shown_default(item)
            hint = model_settings.value_type(settings_type, item.name)
            keys[key] = ConfigKey(key, item.name, hint, declared.doc, default)
    return keys


_USER_DOC = "A least-privilege RabbitMQ user for this endpoint, with the keys below."
_ENDPOINTS_DOC = "The endpoints: each a name, or a mapping with `name` and the keys below."
# The keys that give the config its shape rather than set a component's setting: declared here, once.
SHAPE_KEYS: dict[str, tuple[ConfigKey, ...]] = {
    RABBITMQ: (ConfigKey("endpoints", "endpoints", list, _ENDPOINTS_DOC, "none"),),
    RABBITMQ_ENDPOINT: (ConfigKey("user", "user", Mapping, _USER_DOC, "none"),),
    RABBITMQ_USER: (
        ConfigKey(
            "passwordKey",
            "password_key",
            str,
            "The stack config key `nsb-delays:<key>` that holds the password as a Pulumi secret (required; a "
            "password in plain text is refused).",
            "required",
        ),
    ),
    SQS: (ConfigKey("endpoints", "endpoints", list, _ENDPOINTS_DOC, "none"),),
    SQS_ENDPOINT: (),
    MSMQ: (
        ConfigKey(
            "schema",
            "schema",
            str,
            "The SQL Server schema of the delayed-message tables (scripts only).",
            f'`"{msmq.DEFAULT_SCHEMA}"`',
        ),
        ConfigKey(
            "endpoints",
            "endpoints",
            list,
            "Endpoints of MSMQ transport 2.x whose delayed messages live in a `<endpoint>.timeouts` table.",
            "none",
        ),
    ),
    TOPOLOGY_OPERATOR: (
        ConfigKey(
            "cluster",
            "cluster",
            str,
            "The `RabbitmqCluster` (its `metadata.name`) the Messaging Topology Operator's resources are declared in "
            "(`render --format topology-operator`; `--cluster` overrides it, and gives it when this is not set).",
            "none",
        ),
        ConfigKey(
            "namespace",
            "namespace",
            str,
            "The `RabbitmqCluster`'s namespace, when it is not the resources' own (`--namespace` overrides it).",
            "none",
        ),
    ),
}


@functools.cache
def config_keys() -> dict[str, dict[str, ConfigKey]]:
    """Every key the parser accepts, by place (``rabbitmq`` is ``nsb-delays:rabbitmq``, ``rabbitmq.endpoints[]`` an
    entry of its ``endpoints``), settings first in their declaration order. Derived once (the parser reads it for
    each section and each endpoint user); callers only read it."""
    return {
        place: {**_setting_keys(place), **{shape.key: shape for shape in SHAPE_KEYS[place]}} for place in SECTION_PLACES
    }
