"""Pulumi's unit-test pattern works with the transports (issue 51): the components reference's test file (a block of
``docs/reference/components.md`` marked ``runs-with: pytest``), saved as a file of its own and run by pytest in a
process of its own, as a user runs it: mocks set once, a transport declared in each of its tests, every test passes.
Before, the second test was refused ("a stack declares one RabbitMqTransport")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.docs.examples import PROJECT, blocks_run_in
from tests.docs.live import PYTEST

PAGE = PROJECT / "docs" / "reference" / "components.md"


def test_the_references_test_file_passes_every_test_under_one_set_mocks(tmp_path: Path) -> None:
    (block,) = blocks_run_in(PYTEST, [PAGE])
    tests = re.findall(r"^def (test_\w+)", block.source, re.MULTILINE)
    assert len(tests) >= 3 and block.source.count("set_mocks(") == 1, block.where
    (tmp_path / "test_delays.py").write_text(block.source)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "test_delays.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{block.where}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    assert f"{len(tests)} passed" in result.stdout, result.stdout[-3000:]
