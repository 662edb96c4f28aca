"""The README is also the PyPI page (``[project] readme``): short, and every link absolute, because PyPI resolves
neither relative paths nor in-page anchors; links into this repository name files that exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MAX_LINES = 150
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def repository_files_prefix() -> str:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    return urls["Repository"].rstrip("/") + "/blob/main/"


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= MAX_LINES


def test_every_link_is_absolute_and_names_an_existing_file_of_this_repository() -> None:
    links = LINK.findall(README)
    assert links, "the README links into the documentation"
    relative = [link for link in links if not link.startswith("https://")]
    assert relative == [], "PyPI cannot resolve these"
    prefix = repository_files_prefix()
    ours = [link.removeprefix(prefix).split("#")[0] for link in links if link.startswith(prefix)]
    assert ours and [path for path in ours if not (ROOT / path).exists()] == []


def test_the_two_commands_for_a_fresh_machine_are_named() -> None:
    assert "make demo" in README and "make test" in README
