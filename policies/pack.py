"""The pack's name and its rules, in one list that ``__main__`` serves and ``nsb-delays check`` runs."""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, Policy

from .rules import RESOURCE_POLICIES
from .stack_rules import STACK_POLICIES
from .transport_rules import TRANSPORT_POLICIES

PACK_NAME = "nsb-delays"
DEFAULT_ENFORCEMENT_LEVEL = EnforcementLevel.ADVISORY  # every rule states its own level
POLICIES: list[Policy] = [*RESOURCE_POLICIES, *STACK_POLICIES, *TRANSPORT_POLICIES]
POLICIES_BY_NAME: dict[str, Policy] = {policy.name: policy for policy in POLICIES}

if len(POLICIES_BY_NAME) != len(POLICIES):
    raise RuntimeError("two policies in the nsb-delays pack share a name")
