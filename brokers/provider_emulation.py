"""terraform-provider-rabbitmq, as pulumi-rabbitmq bridges it, re-enacted against a live broker.

No Pulumi CLI or provider plugin runs on these machines, so this module does what the provider
would do with each resource, rule by rule, from its source: pulumi-rabbitmq 3.5.3 (the version in
our venv; ``pulumi/pulumi-rabbitmq`` pins its ``upstream`` submodule to
``cyrilgdn/terraform-provider-rabbitmq`` v1.10.1, commit c196856) over the management HTTP API
client ``michaelklishin/rabbit-hole`` v3.2.0. Each function names the Go file and function it
follows. The engine's side (plan, apply, refresh, import) is in ``engine_emulation``.

Resource properties are kept as the bridge presents them to Pulumi: camelCase names, the
``settings``/``policy`` blocks (``MaxItems: 1`` lists) as single objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote

from nsb_delays.components.resource_types import RABBITMQ_BINDING as BINDING
from nsb_delays.components.resource_types import RABBITMQ_EXCHANGE as EXCHANGE
from nsb_delays.components.resource_types import RABBITMQ_POLICY as POLICY
from nsb_delays.components.resource_types import RABBITMQ_QUEUE as QUEUE

from .management import ManagementApi, ManagementError, path_segment

PROVIDER = "pulumi-rabbitmq 3.5.3 (terraform-provider-rabbitmq v1.10.1)"
RESOURCE_TYPES = (EXCHANGE, QUEUE, BINDING, POLICY)
# Resources whose ``name`` input is set explicitly (never autonamed here): the bridge replaces them
# delete-before-replace (pulumi-terraform-bridge ``pkg/tfbridge/schema.go``,
# ``nameRequiresDeleteBeforeReplace``). A binding has no name, so it is replaced create-before-delete.
NAMED_TYPES = (EXCHANGE, QUEUE, POLICY)

Kind = Literal["string", "bool", "int", "map", "json"]


class ProviderError(RuntimeError):
    """The provider failed a call: the broker refused it, or an id cannot be parsed."""


@dataclass(frozen=True)
class Field:
    """One attribute of a resource schema: its Pulumi path, type, default and whether it forces replacement."""

    path: tuple[str, ...]
    kind: Kind
    required: bool = False
    default: Any = None
    force_new: bool = True
    computed: bool = False

    @property
    def name(self) -> str:
        return ".".join(self.path)


# The schemas of resource_exchange.go / resource_queue.go / resource_binding.go / resource_policy.go
# (``resourceExchange`` etc.): every Exchange, Queue and Binding field is ForceNew (they have no
# Update); a Policy updates its ``policy`` block in place.
SCHEMAS: dict[str, tuple[Field, ...]] = {
    EXCHANGE: (
        Field(("name",), "string", required=True),
        Field(("vhost",), "string", default="/"),
        Field(("settings", "type"), "string", required=True),
        Field(("settings", "durable"), "bool", default=False),
        Field(("settings", "autoDelete"), "bool", default=False),
        Field(("settings", "arguments"), "map"),
    ),
    QUEUE: (
        Field(("name",), "string", required=True),
        Field(("vhost",), "string", default="/"),
        Field(("settings", "durable"), "bool", default=False),
        Field(("settings", "autoDelete"), "bool", default=False),
        Field(("settings", "arguments"), "map"),
        Field(("settings", "argumentsJson"), "json"),
    ),
    BINDING: (
        Field(("source",), "string", required=True),
        Field(("vhost",), "string", required=True),
        Field(("destination",), "string", required=True),
        Field(("destinationType",), "string", required=True),
        Field(("propertiesKey",), "string", computed=True),
        Field(("routingKey",), "string"),
        Field(("arguments",), "map"),
        Field(("argumentsJson",), "json"),
    ),
    POLICY: (
        Field(("name",), "string", required=True),
        Field(("vhost",), "string", required=True),
        Field(("policy", "pattern"), "string", required=True, force_new=False),
        Field(("policy", "priority"), "int", required=True, force_new=False),
        Field(("policy", "applyTo"), "string", required=True, force_new=False),
        Field(("policy", "definition"), "map", required=True, force_new=False),
    ),
}
REQUIRED_BLOCKS = {EXCHANGE: "settings", QUEUE: "settings", POLICY: "policy"}
# ``ConflictsWith`` pairs (resource_queue.go, resource_binding.go).
CONFLICTS = {
    QUEUE: (("settings", "arguments"), ("settings", "argumentsJson")),
    BINDING: (("arguments",), ("argumentsJson",)),
}


@dataclass(frozen=True)
class PropertyDiff:
    """One attribute that differs between the provider's state (or the broker) and the program."""

    path: str
    old: Any  # state / broker value (None: absent)
    new: Any  # program value (None: absent)
    replaces: bool

    def parts(self) -> list[tuple[str, Any, Any]]:
        """(path, old, new) per difference: a JSON object attribute key by key (``settings.argumentsJson['x']``)."""
        keyed = _json_key_differences(self.old, self.new)
        if keyed:
            return [(f"{self.path}[{key!r}]", old, new) for key, old, new in keyed]
        return [(self.path, self.old, self.new)]

    def describe(self, old_label: str = "state", new_label: str = "program") -> str:
        """``settings.argumentsJson['x-message-ttl']: program 8000, state 9999``."""
        return "; ".join(
            f"{path}: {new_label} {_shown(new)}, {old_label} {_shown(old)}" for path, old, new in self.parts()
        )


def _json_key_differences(old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    """The keys whose values differ between two JSON-object strings (empty unless both are objects)."""
    try:
        old_value, new_value = json.loads(old), json.loads(new)
    except (TypeError, ValueError):
        return []
    if not (isinstance(old_value, dict) and isinstance(new_value, dict)):
        return []
    return [
        (key, old_value.get(key), new_value.get(key))
        for key in sorted(set(old_value) | set(new_value))
        if key not in old_value or key not in new_value or not go_deep_equal(old_value[key], new_value[key])
    ]


@dataclass(frozen=True)
class ProviderResult:
    """What a Create or Read leaves in the state: the resource id and its properties (outputs)."""

    id: str
    outputs: dict[str, Any]


def _shown(value: Any) -> str:
    return "(absent)" if value is None else repr(value)


# --- ids -------------------------------------------------------------------------------------------------


def resource_id(name: str, vhost: str) -> str:
    """``name@vhost``: the id ``CreateExchange``/``CreateQueue``/``CreatePolicy`` set (``fmt.Sprintf("%s@%s")``)."""
    return f"{name}@{vhost}"


def parse_resource_id(resource_id: str) -> tuple[str, str]:
    """util.go ``parseId``: split on every ``@``; exactly two parts, else the id cannot be parsed.

    So a name or vhost containing ``@`` never round-trips (cyrilgdn/terraform-provider-rabbitmq#33).
    """
    parts = resource_id.split("@")
    if len(parts) != 2:
        raise ProviderError(f"unable to parse resource id: {resource_id}")
    return parts[0], parts[1]


def percent_encode_slashes(text: str) -> str:
    """util.go ``percentEncodeSlashes``: ``%`` -> ``%25`` first, then ``/`` -> ``%2F`` (vhosts in binding ids)."""
    return text.replace("%", "%25").replace("/", "%2F")


def percent_decode_slashes(text: str) -> str:
    """util.go ``percentDecodeSlashes``: ``%2F`` -> ``/`` first, then ``%25`` -> ``%``."""
    return text.replace("%2F", "/").replace("%25", "%")


@dataclass(frozen=True)
class BindingId:
    vhost: str
    source: str
    destination: str
    destination_type: str
    properties_key: str

    def __str__(self) -> str:
        """resource_binding.go ``CreateBinding``: only the vhost is escaped; the other parts go in as they are."""
        return "/".join(
            (
                percent_encode_slashes(self.vhost),
                self.source,
                self.destination,
                self.destination_type,
                self.properties_key,
            )
        )


def parse_binding_id(binding_id: str) -> BindingId:
    """resource_binding.go ``ReadBinding``/``DeleteBinding``: split on every ``/`` and take parts 0..4.

    Fewer than five parts is an error; a source or destination containing ``/`` shifts the parts,
    so such a binding is looked up under the wrong names (and not found).
    """
    parts = binding_id.split("/")
    if len(parts) < 5:
        raise ProviderError(f"unable to determine binding ID: {binding_id}")
    return BindingId(percent_decode_slashes(parts[0]), parts[1], parts[2], parts[3], parts[4])


# --- values as Go sees them --------------------------------------------------------------------------------


def _go_number(value: Any) -> Any:
    """``encoding/json`` decodes every JSON number into a float64 and encodes an integral float64 without
    a fraction (``1000``, never ``1000.0``): what reaches the broker is integral whenever the value is."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {key: _go_number(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_go_number(item) for item in value]
    return value


def go_json_marshal(value: Any) -> str:
    """``json.Marshal`` of a decoded map: keys sorted, no spaces, integral numbers without a fraction."""
    return json.dumps(_go_number(value), sort_keys=True, separators=(",", ":"))


def go_deep_equal(a: Any, b: Any) -> bool:
    """``reflect.DeepEqual`` on two ``json.Unmarshal`` results: numbers are float64 (``8000`` equals
    ``8000.0``), a string never equals a number (``"8000"`` is not ``8000``), a bool never equals 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(go_deep_equal(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(go_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def suppress_json_diff(old: str, new: str) -> bool:
    """terraform-plugin-sdk v2.37.0 ``helper/structure/suppress_json_diff.go`` ``SuppressJsonDiff``:
    both sides decoded as JSON objects (``ExpandJsonFromString``), then ``reflect.DeepEqual``. Key order
    and spacing never matter; a side that is not a JSON object never suppresses the diff."""
    try:
        old_value, new_value = json.loads(old), json.loads(new)
    except (TypeError, ValueError):
        return False
    if not all(isinstance(value, dict) or value is None for value in (old_value, new_value)):
        return False
    return go_deep_equal(old_value, new_value)


def _non_string_in(arguments: Mapping[str, Any]) -> bool:
    """resource_queue.go ``nonStringInArguments``."""
    return any(not isinstance(value, str) for value in arguments.values())


def value_at(props: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    current: Any = props
    for key in path:
        if not isinstance(current, Mapping) or key not in current:
            return None
        current = current[key]
    return current


def _zero(kind: Kind) -> Any:
    return {"string": "", "bool": False, "int": 0, "map": {}, "json": ""}[kind]


def _normalised(field: Field, value: Any) -> Any:
    """A value as the Terraform schema sees it: absent means the default, else the zero value of its type
    (SDK v2 does not tell an unset optional attribute from a zero one; an empty map equals no map)."""
    if value is None:
        value = field.default if field.default is not None else _zero(field.kind)
    if field.kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    if field.kind == "map":
        return {key: map_string(item) for key, item in dict(value).items()}
    return value


def map_string(value: Any) -> Any:
    """A value of a ``TypeMap`` attribute (its elements are strings): the bridge hands Terraform a number
    or boolean from the program as its string (``100000`` -> ``"100000"``, ``True`` -> ``"true"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _format_float(float(value))
    return value


def _same(field: Field, old: Any, new: Any) -> bool:
    if field.kind == "json" and old and new and suppress_json_diff(old, new):
        return True
    return bool(_normalised(field, old) == _normalised(field, new))


# --- Check and Diff ----------------------------------------------------------------------------------------


def check(type_token: str, inputs: Mapping[str, Any]) -> list[str]:
    """The schema's validation: required attributes, ``ConflictsWith`` and ``validation.StringIsJSON``.

    resource_queue.go / resource_binding.go: ``arguments`` and ``arguments_json`` conflict, and
    ``arguments_json`` must be valid JSON. The bridge reports these from ``Check``.
    """
    failures = []
    block = REQUIRED_BLOCKS.get(type_token)
    block_missing = block is not None and not isinstance(inputs.get(block), Mapping)
    if block_missing:
        failures.append(f"{block}: required block is not set")
    for field in SCHEMAS[type_token]:
        if block_missing and field.path[0] == block:
            continue
        value = value_at(inputs, field.path)
        if field.required and value is None:
            failures.append(f"{field.name}: required attribute is not set")
        if field.kind == "json" and value:
            try:
                json.loads(value)
            except (TypeError, ValueError) as error:
                failures.append(f"{field.name}: contains an invalid JSON: {error}")
    if type_token in CONFLICTS:
        first, second = CONFLICTS[type_token]
        if value_at(inputs, first) and value_at(inputs, second):
            failures.append(f"{'.'.join(first)}: conflicts with {'.'.join(second)}")
    return failures


def diff(type_token: str, state: Mapping[str, Any], inputs: Mapping[str, Any]) -> list[PropertyDiff]:
    """The bridge's ``Diff``: the Terraform schema diff of the state against the program's inputs.

    Every attribute compares by value after defaults (``vhost`` ``/``, ``durable`` false, …; an absent
    map equals an empty one); ``arguments_json`` goes through ``SuppressJsonDiff``; computed
    attributes (a binding's ``properties_key``) never differ. ``replaces`` follows ``ForceNew``.
    """
    changes = []
    for field in SCHEMAS[type_token]:
        if field.computed:
            continue
        old, new = value_at(state, field.path), value_at(inputs, field.path)
        if not _same(field, old, new):
            changes.append(PropertyDiff(field.name, old, new, field.force_new))
    return changes


def extract_inputs_for_import(type_token: str, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """pulumi-terraform-bridge ``pkg/tfbridge/schema.go`` ``extractSchemaInputs``: what an import reads back
    as inputs. Computed-only attributes are dropped, and so is every optional attribute holding its
    default or zero value (``durable: false``, an empty ``arguments`` map, an empty routing key)."""
    inputs: dict[str, Any] = {}
    for field in SCHEMAS[type_token]:
        value = value_at(outputs, field.path)
        if field.computed or value is None:
            continue
        if not field.required and _normalised(field, value) == _normalised(field, None):
            continue
        target = inputs
        for key in field.path[:-1]:
            target = target.setdefault(key, {})
        target[field.path[-1]] = value
    for block in (REQUIRED_BLOCKS.get(type_token),):
        if block and block in outputs:
            inputs.setdefault(block, {})
    return inputs


def extract_inputs_for_refresh(old_inputs: Any, outputs: Any) -> Any:
    """pulumi-terraform-bridge ``pkg/tfbridge/schema.go`` ``extractInputs``: a refresh keeps the inputs the
    state had and takes each one's new value from the outputs (an input missing from them is dropped)."""
    if isinstance(old_inputs, Mapping) and isinstance(outputs, Mapping):
        return {
            key: extract_inputs_for_refresh(value, outputs[key]) for key, value in old_inputs.items() if key in outputs
        }
    return outputs


# --- Create: request bodies ---------------------------------------------------------------------------------


def exchange_declaration(inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """resource_exchange.go ``CreateExchange``/``declareExchange`` -> rabbit-hole ``DeclareExchange``:
    ``PUT /api/exchanges/{vhost}/{name}`` with ``ExchangeSettings`` (``auto_delete`` and ``arguments``
    are ``omitempty``)."""
    settings = inputs.get("settings") or {}
    body: dict[str, Any] = {"type": settings.get("type", ""), "durable": bool(settings.get("durable", False))}
    if settings.get("autoDelete"):
        body["auto_delete"] = True
    if settings.get("arguments"):
        body["arguments"] = dict(settings["arguments"])
    path = f"exchanges/{path_segment(inputs.get('vhost') or '/')}/{path_segment(inputs['name'])}"
    return path, body


def queue_declaration(inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """resource_queue.go ``CreateQueue``/``declareQueue`` -> rabbit-hole ``DeclareQueue``.

    A non-empty ``arguments_json`` is ``json.Unmarshal``-ed and replaces ``arguments`` (so ints stay
    numbers); else the string map ``arguments`` is sent as it is. The body is ``QueueSettings``:
    ``type`` always present (the provider leaves it ``""``), ``auto_delete`` and ``arguments`` omitted
    when empty. ``PUT /api/queues/{vhost}/{name}``.
    """
    settings = inputs.get("settings") or {}
    arguments: dict[str, Any]
    if settings.get("argumentsJson"):
        try:
            arguments = _go_number(json.loads(settings["argumentsJson"]))
        except ValueError as error:
            raise ProviderError(f"settings.argumentsJson: {error}") from None
    else:
        arguments = dict(settings.get("arguments") or {})
    body: dict[str, Any] = {"type": "", "durable": bool(settings.get("durable", False))}
    if settings.get("autoDelete"):
        body["auto_delete"] = True
    if arguments:
        body["arguments"] = arguments
    path = f"queues/{path_segment(inputs.get('vhost') or '/')}/{path_segment(inputs['name'])}"
    return path, body


def _binding_path(vhost: str, source: str, destination_type: str, destination: str) -> str:
    """rabbit-hole ``bindingPath``: ``q`` only for destination type ``queue``, ``e`` for anything else."""
    kind = "q" if destination_type == "queue" else "e"
    return f"bindings/{path_segment(vhost)}/e/{path_segment(source)}/{kind}/{path_segment(destination)}"


def binding_declaration(inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """resource_binding.go ``CreateBinding`` -> rabbit-hole ``DeclareBinding``: ``POST`` the ``BindingInfo``
    (``arguments`` from ``arguments_json`` when set, never omitted) to the source/destination pair."""
    arguments: dict[str, Any] = dict(inputs.get("arguments") or {})
    if inputs.get("argumentsJson"):
        arguments = _go_number(json.loads(inputs["argumentsJson"]))
    vhost = inputs["vhost"]
    body = {
        "source": inputs["source"],
        "vhost": vhost,
        "destination": inputs["destination"],
        "destination_type": inputs["destinationType"],
        "routing_key": inputs.get("routingKey") or "",
        "arguments": arguments,
    }
    return _binding_path(vhost, inputs["source"], inputs["destinationType"], inputs["destination"]), body


_GO_INT = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: optional sign and decimal digits only, within int64."""
    if not _GO_INT.fullmatch(text):
        return None
    number = int(text)
    return number if -(1 << 63) <= number < (1 << 63) else None


def policy_declaration(inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """resource_policy.go ``putPolicy`` -> rabbit-hole ``PutPolicy``: ``PUT /api/policies/{vhost}/{name}``.

    Definition values are strings in the schema; one that ``strconv.ParseInt`` accepts is sent as an
    integer (``"100000"`` -> ``100000``), and ``ha-mode: nodes`` splits ``ha-params`` on commas.
    """
    policy = inputs.get("policy") or {}
    definition: dict[str, Any] = {key: map_string(value) for key, value in (policy.get("definition") or {}).items()}
    if definition.get("ha-mode") == "nodes" and isinstance(definition.get("ha-params"), str):
        definition["ha-params"] = definition["ha-params"].split(",")
    for key, value in list(definition.items()):
        if isinstance(value, str) and (number := _parse_int64(value)) is not None:
            definition[key] = number
    priority = policy.get("priority")
    body = {
        "vhost": inputs["vhost"],
        "pattern": policy.get("pattern", ""),
        "apply-to": policy.get("applyTo", ""),
        "name": inputs["name"],
        "priority": int(priority) if isinstance(priority, int | float) else 0,
        "definition": definition,
    }
    return f"policies/{path_segment(inputs['vhost'])}/{path_segment(inputs['name'])}", body


# --- Read: broker answers -> state ----------------------------------------------------------------------------


def exchange_state(info: Mapping[str, Any], prior: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """resource_exchange.go ``ReadExchange``: name, vhost and the settings block from ``GetExchange``.

    The ``arguments`` map holds strings only: with any other value ``d.Set("settings", …)`` fails
    (its error is ignored) and the settings keep what the state had.
    """
    state: dict[str, Any] = {"name": info["name"], "vhost": info["vhost"]}
    arguments = dict(info.get("arguments") or {})
    if _non_string_in(arguments):
        if prior and "settings" in prior:
            state["settings"] = dict(prior["settings"])
        return state
    state["settings"] = {
        "type": info["type"],
        "durable": bool(info["durable"]),
        "autoDelete": bool(info["auto_delete"]),
        "arguments": arguments,
    }
    return state


def queue_state(info: Mapping[str, Any], prior: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """resource_queue.go ``ReadQueue``: the arguments go to ``arguments_json`` (``json.Marshal``) when the
    state already has a non-empty ``arguments_json`` (``d.GetOk``) or a value is not a string
    (``nonStringInArguments``); otherwise to the string map ``arguments``. An import has no state, so
    an all-string queue is read into ``arguments``."""
    arguments = dict(info.get("arguments") or {})
    settings: dict[str, Any] = {"durable": bool(info["durable"]), "autoDelete": bool(info["auto_delete"])}
    if value_at(prior, ("settings", "argumentsJson")) or _non_string_in(arguments):
        settings["argumentsJson"] = go_json_marshal(arguments)
    else:
        settings["arguments"] = arguments
    return {"name": info["name"], "vhost": info["vhost"], "settings": settings}


def binding_state(
    listed: list[Mapping[str, Any]], binding_id: BindingId, prior: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """resource_binding.go ``ReadBinding``: the listed binding whose source, destination, destination type
    and ``properties_key`` (from the broker) equal the id's; None when there is none (the provider then
    drops it from the state). Arguments go to ``arguments_json`` only if the state has it, else to the
    string map (where a non-string value makes ``d.Set`` fail, ignored: the map keeps the state's)."""
    for binding in listed:
        if (
            binding["source"] == binding_id.source
            and binding["destination"] == binding_id.destination
            and binding["destination_type"] == binding_id.destination_type
            and binding["properties_key"] == binding_id.properties_key
        ):
            arguments = dict(binding.get("arguments") or {})
            state: dict[str, Any] = {
                "vhost": binding["vhost"],
                "source": binding["source"],
                "destination": binding["destination"],
                "destinationType": binding["destination_type"],
                "routingKey": binding["routing_key"],
                "propertiesKey": binding["properties_key"],
            }
            if value_at(prior, ("argumentsJson",)):
                state["argumentsJson"] = go_json_marshal(arguments)
            elif not _non_string_in(arguments):
                state["arguments"] = arguments
            elif prior and "arguments" in prior:
                state["arguments"] = prior["arguments"]
            return state
    return None


def policy_state(info: Mapping[str, Any]) -> dict[str, Any]:
    """resource_policy.go ``ReadPolicy``: definition numbers back to strings (``strconv.FormatFloat(v, 'f',
    -1, 64)``: ``100000``), lists joined with commas, everything else as the broker has it."""
    definition: dict[str, Any] = {}
    for key, value in (info.get("definition") or {}).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = _format_float(float(value))
        elif isinstance(value, list):
            value = ",".join(item for item in value if isinstance(item, str))
        definition[key] = value
    return {
        "name": info["name"],
        "vhost": info["vhost"],
        "policy": {
            "pattern": info["pattern"],
            "priority": info["priority"],
            "applyTo": info["apply-to"],
            "definition": definition,
        },
    }


def _format_float(value: float) -> str:
    """``strconv.FormatFloat(v, 'f', -1, 64)``: shortest decimal that round-trips, never an exponent."""
    if value.is_integer():
        return str(int(value))
    text = repr(value)
    if "e" in text or "E" in text:
        return format(value, "f").rstrip("0").rstrip(".")
    return text


# --- names for messages ---------------------------------------------------------------------------------------


def describe(type_token: str, props: Mapping[str, Any]) -> str:
    """``queue 'Sales' (vhost '/')``, ``binding 'nsb.v2.delay-delivery' -> exchange 'Sales' key '#.Sales' …``."""
    vhost = props.get("vhost") or "/"
    if type_token == BINDING:
        return (
            f"binding {props.get('source')!r} -> {props.get('destinationType')} {props.get('destination')!r} "
            f"key {props.get('routingKey') or ''!r} (vhost {vhost!r})"
        )
    kind = {EXCHANGE: "exchange", QUEUE: "queue", POLICY: "policy"}.get(type_token, type_token)
    return f"{kind} {props.get('name')!r} (vhost {vhost!r})"


# --- the provider over HTTP -----------------------------------------------------------------------------------


class RabbitMqProviderEmulation:
    """Create, Read, Update and Delete of exchanges, queues, bindings and policies through the management API."""

    def __init__(self, api: ManagementApi) -> None:
        self.api = api

    def _send(self, method: str, path: str, body: Any, what: str) -> Any:
        try:
            return self.api.send(method, path, body)
        except ManagementError as error:
            raise ProviderError(f"{what}: {error}") from None

    def create(self, type_token: str, inputs: Mapping[str, Any]) -> ProviderResult:
        """``Create<Type>``: declare, set the id, then ``Read`` (every Create ends in its Read)."""
        what = f"creating {describe(type_token, inputs)}"
        if type_token == EXCHANGE:
            self._send("PUT", *exchange_declaration(inputs), what)
            new_id = resource_id(inputs["name"], inputs.get("vhost") or "/")
        elif type_token == QUEUE:
            self._send("PUT", *queue_declaration(inputs), what)
            new_id = resource_id(inputs["name"], inputs.get("vhost") or "/")
        elif type_token == BINDING:
            response = self._send("POST", *binding_declaration(inputs), what)
            new_id = str(self.binding_id_from_location(inputs, response.headers.get("Location", "")))
        elif type_token == POLICY:
            self._send("PUT", *policy_declaration(inputs), what)
            new_id = resource_id(inputs["name"], inputs["vhost"])
        else:
            raise ProviderError(f"{PROVIDER} emulation: unsupported resource type {type_token}")
        result = self.read(type_token, new_id)
        if result is None:
            raise ProviderError(f"{what}: declared, but reading {new_id!r} back found nothing")
        return result

    @staticmethod
    def binding_id_from_location(inputs: Mapping[str, Any], location: str) -> BindingId:
        """resource_binding.go ``declareBinding``: the ``properties_key`` is the last ``/``-separated part of
        the response's ``Location`` header, ``url.PathUnescape``-d (the broker double-encodes it there)."""
        properties_key = unquote(location.split("/")[-1])
        return BindingId(
            inputs["vhost"], inputs["source"], inputs["destination"], inputs["destinationType"], properties_key
        )

    def read(self, type_token: str, resource_id: str, prior: Mapping[str, Any] | None = None) -> ProviderResult | None:
        """``Read<Type>``: the object as the broker has it now, or None when it is gone (``checkDeleted``:
        a 404 clears the id). ``prior`` is the state's properties (None for an import)."""
        if type_token == BINDING:
            key = parse_binding_id(resource_id)
            if key.destination_type in ("queue", "exchange"):
                path = _binding_path(key.vhost, key.source, key.destination_type, key.destination)
            else:
                path = f"bindings/{path_segment(key.vhost)}"
            listed = self._send("GET", path, None, f"reading binding {resource_id!r}").json()
            state = binding_state(listed, key, prior)
            return None if state is None else ProviderResult(resource_id, state)
        name, vhost = parse_resource_id(resource_id)
        collection = {EXCHANGE: "exchanges", QUEUE: "queues", POLICY: "policies"}[type_token]
        try:
            info = self.api.send("GET", f"{collection}/{path_segment(vhost)}/{path_segment(name)}").json()
        except ManagementError as error:
            if error.status == 404:
                return None
            raise ProviderError(f"reading {resource_id!r}: {error}") from None
        if type_token == EXCHANGE:
            return ProviderResult(resource_id, exchange_state(info, prior))
        if type_token == QUEUE:
            return ProviderResult(resource_id, queue_state(info, prior))
        return ProviderResult(resource_id, policy_state(info))

    def update(self, type_token: str, resource_id: str, inputs: Mapping[str, Any]) -> ProviderResult:
        """resource_policy.go ``UpdatePolicy``: put the new ``policy`` block, then Read. Only policies update."""
        if type_token != POLICY:
            raise ProviderError(f"{type_token} has no Update: every change replaces it")
        name, vhost = parse_resource_id(resource_id)
        self._send("PUT", *policy_declaration({**inputs, "name": name, "vhost": vhost}), f"updating {resource_id!r}")
        result = self.read(type_token, resource_id)
        if result is None:
            raise ProviderError(f"updating {resource_id!r}: the policy is gone after the update")
        return result

    def delete(self, type_token: str, resource_id: str) -> None:
        """``Delete<Type>``: a 404 counts as deleted (rabbit-hole ``parseResponseErrors`` for DELETE).

        A queue goes with its messages and its bindings; a binding is deleted by its properties key."""
        if type_token == BINDING:
            key = parse_binding_id(resource_id)
            path = (
                f"{_binding_path(key.vhost, key.source, key.destination_type, key.destination)}/"
                f"{path_segment(key.properties_key)}"
            )
        else:
            name, vhost = parse_resource_id(resource_id)
            collection = {EXCHANGE: "exchanges", QUEUE: "queues", POLICY: "policies"}[type_token]
            path = f"{collection}/{path_segment(vhost)}/{path_segment(name)}"
        try:
            self.api.send("DELETE", path)
        except ManagementError as error:
            if error.status != 404:
                raise ProviderError(f"deleting {resource_id!r}: {error}") from None
