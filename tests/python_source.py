"""Python source parsed by the tests that read the project's code (its imports, sizes, docstrings)."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse_python(source: Path | str) -> ast.Module:
    """``ast.parse`` of a file (a ``Path``) or of source text, with the cyclic collector held off while it runs.

    A collection inside the parse can finalize an asyncio task left failed by an earlier test's program (Pulumi's SDK
    keeps a failed program's outputs until the next program starts); asyncio logs it, and CPython 3.11 formats the
    traceback's carets with an ``ast.parse`` of its own (``traceback._extract_caret_anchors_from_line_segment``).
    That nested parse resets the interpreter's one AST recursion counter (``PyAST_mod2obj`` in
    ``Python/Python-ast.c``), and the outer parse fails with ``SystemError: AST constructor recursion depth
    mismatch``: one test in a few hundred runs, on any file."""
    text, filename = (
        (source.read_text(encoding="utf-8"), str(source)) if isinstance(source, Path) else (source, "<text>")
    )
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(text, filename)
    finally:
        if enabled:
            gc.enable()
