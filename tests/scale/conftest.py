"""The scale tier: a stack of the delay graph and 1,000 endpoints through the real engine on each broker version
(``pulumi up`` with PULUMI_SKIP_CHECKPOINTS, no-change preview and refresh, ``verify``), and an ``up`` killed midway
and recovered. Opt-in: it takes about ten minutes of the 2-core machine per broker version (CONTRIBUTING.md, The
suite's figures), so ``make test`` skips it unless NSB_SCALE_TESTS=1; ``make scale`` runs it.
NSB_SCALE_ENDPOINTS changes the size (default 1,000)."""

from __future__ import annotations

import os

import pytest

from tests.broker.conftest import new_vhost  # noqa: F401  (fixtures for this tier too)
from tests.engine.conftest import engine, new_stack  # noqa: F401

OPT_IN = "NSB_SCALE_TESTS"
ENDPOINTS = int(os.environ.get("NSB_SCALE_ENDPOINTS", "1000"))
PARALLEL = "16"  # as bench/pulumi.py measures it
UP_TIMEOUT = 3600.0  # a hung up fails the test instead of the suite; never a timing assertion

opted_in = pytest.mark.skipif(
    os.environ.get(OPT_IN, "").lower() not in ("1", "true", "yes"),
    reason=f"the scale tier is opt-in: {OPT_IN}=1 or `make scale` runs it",
)


def endpoint_names(count: int = ENDPOINTS) -> list[str]:
    return [f"Endpoint{i:05d}" for i in range(count)]
