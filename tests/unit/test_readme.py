"""The README is also the PyPI page (``[project] readme``): short; PyPI resolves neither relative paths nor in-page
anchors, so it names the documentation's files as paths of the source distribution, each one that exists; and no
address it or the package metadata gives is a placeholder shown as real (no public repository exists yet)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MAX_LINES = 150
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
NAMED_FILE = re.compile(r"`([\w./-]+\.md)`")
# addresses that look real and are not: the project has no repository or site of its own yet
PLACEHOLDERS = re.compile(r"github\.com/nsb-delays|nsb-delays\.(?:io|dev|org)|example\.(?:com|org|net)|your-org")


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= MAX_LINES


def test_every_link_is_absolute() -> None:
    assert [link for link in LINK.findall(README) if not link.startswith("https://")] == [], "PyPI cannot resolve these"


def test_every_documentation_file_named_exists() -> None:
    named = NAMED_FILE.findall(README)
    assert "docs/index.md" in named and "docs/reference/compatibility.md" in named
    documentation = {page.name for page in (ROOT / "docs").rglob("*.md")}
    missing = [name for name in named if not ((ROOT / name).exists() or name in documentation)]
    assert missing == []


def test_no_placeholder_address_is_shown_as_real() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "urls" not in project, "add [project.urls] once a public repository exists"
    assert PLACEHOLDERS.findall(README) == []


def test_the_two_commands_for_a_fresh_machine_are_named() -> None:
    assert "make demo" in README and "make test" in README
