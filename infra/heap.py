"""The program's process and CPython's garbage collector: full collections deferred while it registers.

A Pulumi program keeps everything it registers alive until it ends: each resource, its inputs and outputs, their
futures and tasks. CPython's collector then walks that whole, ever larger heap at each full collection, to free
next to nothing: a full collection runs once generation 1 has been collected ``threshold2`` times (10) and the
objects that survived since the last one amount to a quarter of those it kept (CPython ``Modules/gcmodule.c``,
``gc_collect_generations``, 3.11). Under Pulumi's mocks at 2,000 endpoints the program spent more than half of its
time in 18 full collections that freed 4,197 objects of a heap of about 500 MB (docs/measurements.md, "program").
Generations 0 and 1 keep their thresholds, so the cycles the program's asyncio work leaves are freed as before (the
peak memory stayed the same); a full collection runs after 100 times as many young ones as by default.
"""

from __future__ import annotations

import gc

FULL_COLLECTION_AFTER = 1000  # collections of generation 1 (CPython's default: 10)


def defer_full_collections() -> None:
    """For a process that registers a stack and then ends (``infra/__main__.py``, ``bench program``)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_AFTER)
