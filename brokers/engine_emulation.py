"""The Pulumi engine's side of ``pulumi up``, ``pulumi refresh`` and ``import``, driving the provider emulation.

The program's registrations (``infra.recording``: every ``RegisterResource`` with its inputs,
options and property dependencies) go through the steps the engine would generate for them
against a stack state kept here, and each step calls ``provider_emulation`` the way the engine
calls the provider plugin. Sources: pulumi/pulumi ``pkg/resource/deploy/step_generator.go``
(``generateSteps``, ``calculateDependentReplacements``) and ``pkg/resource/deploy/step.go``
(``ImportStep.Apply``, ``DeleteStep.Apply``).

One deliberate difference: ``apply`` refuses a plan with any error before it changes anything
(the engine's preview shows the same errors, but an update would stop midway). Only RabbitMQ
resources are handled; component resources and SQS queues are skipped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from nsb_delays.components.model import rabbitmq as rmq
from nsb_delays.infra.recording import RecordedResource

from .management import ManagementApi
from .provider_emulation import (
    NAMED_TYPES,
    RESOURCE_TYPES,
    PropertyDiff,
    ProviderError,
    ProviderResult,
    RabbitMqProviderEmulation,
    check,
    describe,
    diff,
    extract_inputs_for_refresh,
)


class PlanRefused(RuntimeError):
    """The plan has errors (a protected replacement, an import that does not match, invalid inputs);
    nothing was changed. The message lists every error."""

    def __init__(self, plan: Plan) -> None:
        super().__init__("\n".join(plan.errors))
        self.plan = plan


class ApplyError(RuntimeError):
    """The provider failed a step during ``apply`` (e.g. the broker refused a declaration)."""


@dataclass
class StateEntry:
    """One resource in the stack's state: the id the provider set, inputs, outputs and options."""

    urn: str
    type: str
    id: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    protect: bool = False
    retain_on_delete: bool = False
    property_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return describe(self.type, self.outputs or self.inputs)


@dataclass(frozen=True)
class Step:
    """What the engine does with one resource: ``create``, ``same``, ``update``, ``replace``, ``delete``,
    ``import``; for a refresh ``unchanged``, ``changed`` or ``gone``. ``error`` refuses the plan."""

    op: str
    urn: str
    type: str
    label: str
    reason: str = ""
    diffs: tuple[PropertyDiff, ...] = ()
    error: str | None = None
    delete_before_replace: bool = False
    resource: RecordedResource | None = None
    found: ProviderResult | None = None  # import: what the read found on the broker

    def describe(self) -> str:
        text = f"{self.op} {self.label}"
        if self.reason:
            text += f": {self.reason}"
        return text


class _StepSubject(TypedDict):
    """The fields every step for one program resource shares (``Step(op, …, **subject)``)."""

    urn: str
    type: str
    label: str
    resource: RecordedResource


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]

    @property
    def errors(self) -> list[str]:
        return [step.error for step in self.steps if step.error]

    @property
    def changes(self) -> list[Step]:
        return [step for step in self.steps if step.op not in ("same", "unchanged")]

    def ops(self) -> Counter[str]:
        return Counter(step.op for step in self.steps)

    def with_op(self, op: str) -> list[Step]:
        return [step for step in self.steps if step.op == op]

    def describe(self) -> str:
        return "\n".join(step.describe() for step in self.changes) or "no changes"


def _listed(diffs: Iterable[PropertyDiff], old_label: str, new_label: str) -> str:
    return "; ".join(change.describe(old_label, new_label) for change in diffs)


def _protected_replacement(urn: str, label: str, name: Any, reason: str) -> str:
    """step_generator.go ``generateSteps``: a replacement of a resource protected in the state and in the
    program is an error (the engine's text), plus what would be lost and how to get out of it."""
    message = (
        f'unable to replace resource "{urn}"\nas it is currently marked for protection. '
        f"{label} would be replaced (deleted, with every message in it, then declared again) because {reason}."
    )
    if isinstance(name, str) and rmq.parse_delay_level_name(name):
        message += (
            " It is a delay-level queue, protected by nsb-delays:rabbitmq.protectDelayQueues (default true). "
            "Fix: declare the queue on the broker again exactly as the program does (its messages are kept "
            "only if you move them first), or drain it, set protectDelayQueues: false and run the update."
        )
    else:
        message += " Fix: remove `protect` from the resource in the program, or restore the object on the broker."
    return message


def _import_mismatch(label: str, import_id: str, changes: list[PropertyDiff]) -> str:
    """step.go ``ImportStep.Apply``: any diff between the program's inputs and the read fails the import."""
    lines = [f"{label}: inputs to import do not match the existing resource (id {import_id!r}):"]
    lines += [
        f"  {path}: expected {_shown(new)} (program), actual {_shown(old)} (broker)"
        for change in changes
        for path, old, new in change.parts()
    ]
    lines.append(
        "  Fix: a RabbitMQ object cannot change in place; make the program declare what the broker holds, or "
        "drain and delete the object and let the program create it (without adoptExisting). "
        "Nothing was imported or changed."
    )
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return "(absent)" if value is None else repr(value)


class PulumiEngineEmulation:
    """A stack's state plus the engine's step generation over ``RabbitMqProviderEmulation``."""

    def __init__(self, api: ManagementApi, state: Mapping[str, StateEntry] | None = None) -> None:
        self.provider = RabbitMqProviderEmulation(api)
        self.state: dict[str, StateEntry] = dict(state or {})

    @classmethod
    def connect(
        cls, management_url: str, username: str = "guest", password: str = "guest", verify_tls: bool | str = True
    ) -> PulumiEngineEmulation:
        return cls(ManagementApi(management_url, username, password, verify_tls))

    # --- plan ---------------------------------------------------------------------------------------------

    def plan(self, resources: Iterable[RecordedResource]) -> Plan:
        """The steps ``pulumi preview`` would show for these registrations against the current state."""
        program = [r for r in resources if r.custom and r.type in RESOURCE_TYPES]
        steps: list[Step] = []
        replaced_first: dict[str, str] = {}  # URN -> label of resources deleted before they are replaced
        for resource in program:
            step = self._step_for(resource, replaced_first)
            if step.op == "replace" and step.delete_before_replace and not step.error:
                replaced_first[resource.urn] = step.label
            steps.append(step)
        registered = {r.urn for r in program}
        for entry in reversed(list(self.state.values())):
            if entry.urn in registered:
                continue
            if entry.protect:
                error = (
                    f'unable to delete resource "{entry.urn}"\nas it is currently marked for protection. '
                    f"{entry.label} is no longer in the program. Fix: remove `protect` first (for delay queues "
                    "protectDelayQueues: false), or put the resource back in the program."
                )
                steps.append(
                    Step("delete", entry.urn, entry.type, entry.label, "no longer in the program", error=error)
                )
            else:
                reason = "no longer in the program" + (
                    " (retainOnDelete: removed from the state only)" if entry.retain_on_delete else ""
                )
                steps.append(Step("delete", entry.urn, entry.type, entry.label, reason))
        return Plan(tuple(steps))

    def _step_for(self, resource: RecordedResource, replaced_first: Mapping[str, str]) -> Step:
        label = describe(resource.type, resource.inputs)
        base: _StepSubject = {"urn": resource.urn, "type": resource.type, "label": label, "resource": resource}
        failures = check(resource.type, resource.inputs)
        if failures:
            error = f"{label}: one or more inputs failed to validate: {'; '.join(failures)}"
            return Step("create", reason="invalid inputs", error=error, **base)
        old = self.state.get(resource.urn)
        if old is None:
            if resource.import_id:
                return self._import_step(resource, label)
            return Step("create", reason="not in the stack's state", **base)
        changes = diff(resource.type, old.outputs, resource.inputs)
        replacing = [change for change in changes if change.replaces]
        # calculateDependentReplacements: inputs that come from a resource deleted before its replacement
        # become unknown, and an unknown ForceNew input replaces this resource too (deleted first as well).
        from_replaced = {
            key: [replaced_first[urn] for urn in urns if urn in replaced_first]
            for key, urns in old.property_dependencies.items()
        }
        from_replaced = {key: labels for key, labels in from_replaced.items() if labels}
        if from_replaced:
            reason = "; ".join(
                f"{key} comes from {', '.join(labels)}, which is replaced" for key, labels in from_replaced.items()
            )
            if old.protect and resource.protect:
                error = _protected_replacement(resource.urn, label, resource.inputs.get("name"), reason)
                return Step("replace", reason=reason, diffs=tuple(changes), error=error, **base)
            return Step("replace", reason=reason, diffs=tuple(changes), delete_before_replace=True, **base)
        if not changes:
            return Step("same", **base)
        reason = _listed(changes, "state", "program")
        if replacing:
            if old.protect and resource.protect:
                error = _protected_replacement(resource.urn, label, resource.inputs.get("name"), reason)
                return Step("replace", reason=reason, diffs=tuple(changes), error=error, **base)
            if resource.import_id:
                error = (
                    f"{label}: previously-imported resources that still specify an ID may not be replaced; "
                    f"please remove the `import` declaration from your program (adoptExisting) ({reason})"
                )
                return Step("replace", reason=reason, diffs=tuple(changes), error=error, **base)
            return Step(
                "replace",
                reason=reason,
                diffs=tuple(changes),
                delete_before_replace=resource.type in NAMED_TYPES,
                **base,
            )
        return Step("update", reason=reason, diffs=tuple(changes), **base)

    def _import_step(self, resource: RecordedResource, label: str) -> Step:
        """step.go ``ImportStep.Apply``: Read the id with no state, then Diff the read against the inputs."""
        import_id = resource.import_id or ""
        base: _StepSubject = {"urn": resource.urn, "type": resource.type, "label": label, "resource": resource}
        try:
            found = self.provider.read(resource.type, import_id, prior=None)
        except ProviderError as failure:
            return Step("import", reason=f"id {import_id!r}", error=f"{label}: import failed: {failure}", **base)
        if found is None:
            missing = (
                f"{label}: resource '{import_id}' does not exist. Fix: let the endpoint's installer (or "
                "`rabbitmq-transport endpoint create`) declare it first, or drop adoptExisting so the program "
                "creates it."
            )
            return Step("import", reason=f"id {import_id!r}", error=missing, **base)
        changes = diff(resource.type, found.outputs, resource.inputs)
        mismatch = _import_mismatch(label, import_id, changes) if changes else None
        return Step("import", reason=f"id {import_id!r}", diffs=tuple(changes), error=mismatch, found=found, **base)

    # --- apply --------------------------------------------------------------------------------------------

    def apply(self, plan: Plan) -> None:
        """Carry out a plan: refused as a whole (``PlanRefused``, nothing changed) if any step has an error.

        Imports are read again first (as ``ImportStep.Apply`` does) and a mismatch found now refuses
        the plan too. Then delete-before-replace victims go (dependents first), every create, import,
        update and replacement runs in registration order, and deletions (removed resources,
        create-before-delete replacements) run last, in reverse order.
        """
        if plan.errors:
            raise PlanRefused(plan)
        imported = {}
        for step in plan.with_op("import"):
            assert step.resource is not None
            again = self._import_step(step.resource, step.label)
            if again.error:
                raise PlanRefused(Plan((again,)))
            imported[step.urn] = again.found
        for step in reversed(plan.steps):
            if step.op == "replace" and step.delete_before_replace:
                self._delete(self.state[step.urn])
        superseded: list[StateEntry] = []
        for step in plan.steps:
            resource = step.resource
            if resource is None:
                continue
            if step.op in ("create", "replace"):
                if step.op == "replace" and not step.delete_before_replace:
                    superseded.append(self.state[step.urn])
                self._record(resource, self._call(step, lambda r=resource: self.provider.create(r.type, r.inputs)))
            elif step.op == "import":
                found = imported[step.urn]
                assert found is not None
                self._record(resource, found)
            elif step.op == "update":
                entry = self.state[step.urn]
                result = self._call(step, lambda r=resource, e=entry: self.provider.update(r.type, e.id, r.inputs))
                self._record(resource, result)
            elif step.op == "same":
                entry = self.state[step.urn]
                entry.inputs, entry.protect = dict(resource.inputs), resource.protect
                entry.retain_on_delete = resource.retain_on_delete
        for entry in reversed(superseded):
            self._delete(entry, keep_state=True)
        for step in plan.with_op("delete"):
            self._delete(self.state[step.urn])

    def up(self, resources: Iterable[RecordedResource]) -> Plan:
        """``pulumi up``: plan, then apply (refused as a whole on any error); returns the plan carried out."""
        plan = self.plan(resources)
        self.apply(plan)
        return plan

    def _call(self, step: Step, action: Any) -> ProviderResult:
        try:
            result: ProviderResult = action()
        except ProviderError as error:
            raise ApplyError(f"{step.op} {step.label}: {error}") from None
        return result

    def _record(self, resource: RecordedResource, result: ProviderResult) -> None:
        self.state[resource.urn] = StateEntry(
            urn=resource.urn,
            type=resource.type,
            id=result.id,
            inputs=dict(resource.inputs),
            outputs=result.outputs,
            protect=resource.protect,
            retain_on_delete=resource.retain_on_delete,
            property_dependencies=dict(resource.property_dependencies),
        )

    def _delete(self, entry: StateEntry, keep_state: bool = False) -> None:
        """step.go ``DeleteStep.Apply``: the provider's Delete, skipped for ``retainOnDelete``."""
        if not entry.retain_on_delete:
            try:
                self.provider.delete(entry.type, entry.id)
            except ProviderError as error:
                raise ApplyError(f"delete {entry.label}: {error}") from None
        if not keep_state:
            self.state.pop(entry.urn, None)

    # --- refresh ------------------------------------------------------------------------------------------

    def refresh(self) -> Plan:
        """``pulumi refresh``: Read every resource in the state with its state; a gone one leaves the state,
        a changed one takes what the broker has (outputs, and the inputs the state had)."""
        steps = []
        for entry in list(self.state.values()):
            try:
                found = self.provider.read(entry.type, entry.id, prior=entry.outputs)
            except ProviderError as error:
                raise ApplyError(f"refresh {entry.label}: {error}") from None
            if found is None:
                del self.state[entry.urn]
                steps.append(Step("gone", entry.urn, entry.type, entry.label, "no longer on the broker"))
                continue
            drift = diff(entry.type, found.outputs, entry.outputs)
            entry.outputs = found.outputs
            entry.inputs = extract_inputs_for_refresh(entry.inputs, found.outputs)
            op = "changed" if drift else "unchanged"
            steps.append(Step(op, entry.urn, entry.type, entry.label, _listed(drift, "broker", "state"), tuple(drift)))
        return Plan(tuple(steps))
