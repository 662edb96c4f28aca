"""``parse_python``: the tests' parse of the project's code, proof against a finalizer that parses too."""

from __future__ import annotations

import ast
import gc
from collections.abc import Callable

import pytest

from tests.python_source import parse_python

SOURCE = "\n".join(f"def f{i}(a):\n    return [a for a in range({i})]" for i in range(300))


class ParsesWhenFinalized:
    """An object only the cyclic collector frees, whose finalizer parses (as asyncio's log of a failed task does on
    CPython 3.11)."""

    def __init__(self) -> None:
        self.itself = self

    def __del__(self) -> None:
        ast.parse("x = 1")


def parsed_below_a_deeper_stack(parse: Callable[[str], ast.Module], depth: int = 50) -> ast.Module:
    """``parse`` of SOURCE, with a collection due at every allocation and the finalizer's object waiting for it; from
    a stack deeper than the test's (the nested parse then starts its count elsewhere)."""
    if depth:
        return parsed_below_a_deeper_stack(parse, depth - 1)
    ParsesWhenFinalized()
    thresholds = gc.get_threshold()
    gc.set_threshold(1)
    try:
        return parse(SOURCE)
    finally:
        gc.set_threshold(*thresholds)
        gc.collect()


def test_a_parse_nested_in_a_collection_breaks_a_plain_parse() -> None:
    """The failure ``parse_python`` exists for, reproduced: if this stops failing, CPython fixed it."""
    with pytest.raises(SystemError, match="AST constructor recursion depth mismatch"):
        parsed_below_a_deeper_stack(ast.parse)


def test_parse_python_holds_the_collector_off_while_it_parses() -> None:
    tree = parsed_below_a_deeper_stack(parse_python)
    assert len(tree.body) == 300
    assert gc.isenabled()
