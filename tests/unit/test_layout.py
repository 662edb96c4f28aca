"""The top level a newcomer reads: at most 24 entries, each with its line in CONTRIBUTING.md's Layout table."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
MOST_ENTRIES = 24  # issue 39: a top level a newcomer can read


def tracked_entries() -> set[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=PROJECT, capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the layout is checked in one")
    return {line.split("/")[0] for line in listed.splitlines() if line}


def table_entries() -> set[str]:
    section = (PROJECT / "CONTRIBUTING.md").read_text().split("### Layout", 1)[1].split("\n### ", 1)[0]
    return {match.rstrip("/") for match in re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE)}


def test_the_top_level_is_small_and_each_entry_is_described() -> None:
    entries = tracked_entries()
    assert len(entries) <= MOST_ENTRIES, f"{len(entries)} top-level entries: {sorted(entries)}"
    described = table_entries()
    assert entries == described, (
        f"CONTRIBUTING.md's Layout table: add {sorted(entries - described)}, remove {sorted(described - entries)}"
    )


def test_each_test_module_has_a_name_of_its_own() -> None:
    """pytest imports a test module by its file name when its folder is not a package (rootdir-relative imports):
    two ``test_x.py`` in two tiers make the second one an ``import file mismatch`` error, which only a full run
    shows."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((PROJECT / "tests").rglob("test_*.py")):
        if (path.parent / "__init__.py").exists():
            continue
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(PROJECT)} and {path.relative_to(PROJECT)}")
        seen.setdefault(path.name, path)
    assert not clashes, clashes
