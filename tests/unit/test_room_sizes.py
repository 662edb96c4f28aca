"""Rooms of human size (issue 39): no shipped file over 600 lines, no shipped function over 80, and the Pulumi
program composes nothing of its own (no ``cast``). The shipped folders are read from pyproject.toml's package map."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.python_source import parse_python

PROJECT = Path(__file__).resolve().parents[2]
MOST_FILE_LINES = 600
MOST_FUNCTION_LINES = 80


def shipped_files() -> list[Path]:
    folders = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    files = sorted(path for folder in folders for path in (PROJECT / folder).rglob("*.py"))
    assert files, "pyproject.toml's package map names no folder with Python files"
    return files


def test_no_shipped_file_is_over_600_lines() -> None:
    over = {
        str(path.relative_to(PROJECT)): lines
        for path in shipped_files()
        if (lines := len(path.read_text().splitlines())) > MOST_FILE_LINES
    }
    assert not over, f"over {MOST_FILE_LINES} lines: {over}; split it along a seam"


def test_no_shipped_function_is_over_80_lines() -> None:
    over = {
        f"{path.relative_to(PROJECT)}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
        for path in shipped_files()
        for node in ast.walk(parse_python(path))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MOST_FUNCTION_LINES
    }
    assert not over, f"over {MOST_FUNCTION_LINES} lines: {over}; name its steps"


def test_the_program_casts_nothing() -> None:
    program = parse_python(PROJECT / "infra" / "program.py")
    casts = [
        node.lineno
        for node in ast.walk(program)
        if isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "cast"
    ]
    assert not casts, f"infra/program.py calls cast at lines {casts}: the transports' components compose the stack"
