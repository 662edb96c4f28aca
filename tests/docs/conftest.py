"""The docs tier: the documentation site built as ``make docs`` builds it (``mkdocs build --strict``: every internal
link and anchor checked offline, the generated references made from the code, every Mermaid diagram drawn by
mermaid-cli), once per session into a temporary folder; then served on 127.0.0.1 and opened in Debian's headless
chromium (the one mermaid-cli drives, ``tools/node/puppeteer-config.json``).

The screenshot of the home page is kept as a test artifact: ``.cache/test-artifacts/docs-home.png`` (or under
``NSB_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nsb_delays.infra.commands.demo.servers import HOST, free_port, wait_until
from tests.conftest import unavailable
from tests.jobs import JOB_HANG_GUARD_SECONDS

PROJECT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("NSB_TEST_ARTIFACTS") or PROJECT / ".cache" / "test-artifacts")
# Debian's chromium as mermaid-cli starts it (tools/node/puppeteer-config.json), plus what a one-shot headless run needs.
CHROMIUM_FLAGS = [
    *json.loads((PROJECT / "tools" / "node" / "puppeteer-config.json").read_text())["args"],
    "--headless",
    "--disable-gpu",
    "--hide-scrollbars",
    "--mute-audio",
]


@dataclass(frozen=True)
class Site:
    root: Path
    seconds: float
    log: str

    def page(self, path: str) -> str:
        """The HTML of a page by its URL path (``reference/cli/``)."""
        return (self.root / path / "index.html").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The site, built once per session as ``make docs`` builds it; a warning or an error fails every docs test."""
    if not MKDOCS.is_file():
        pytest.fail(f"{MKDOCS} is missing: `make setup` installs the docs extra", pytrace=False)
    root = tmp_path_factory.mktemp("site")
    start = time.monotonic()
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(root)],
        cwd=PROJECT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    seconds = time.monotonic() - start
    if result.returncode != 0:
        pytest.fail(f"mkdocs build --strict exited {result.returncode}:\n{result.stderr[-6000:]}", pytrace=False)
    return Site(root, seconds, result.stderr)


@pytest.fixture(scope="session")
def served(site: Site) -> Iterator[str]:
    """The built site over HTTP on a free loopback port (python's http.server, stopped by its PID)."""
    port = free_port()
    log = site.root.parent / "http.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", HOST, "--directory", str(site.root)],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://{HOST}:{port}/"
    try:
        wait_until(lambda: urllib.request.urlopen(url, timeout=1).status == 200, "the docs HTTP server", 20, log)
        yield url
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)
        if server.poll() is None:
            server.kill()
            server.wait()


def chromium(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Headless chromium, one shot (its own profile folder under ``cwd``); skips/fails as ``unavailable`` when it is
    not installed."""
    if not Path(CHROMIUM).is_file() and shutil.which("chromium") is None:
        unavailable("chromium is not installed (make setup installs Debian's chromium)")
    profile = cwd / "chromium-profile"
    command = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *arguments]
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=JOB_HANG_GUARD_SECONDS, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        pytest.fail(f"chromium exited {result.returncode}:\n{result.stderr[-3000:]}", pytrace=False)
    return result


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def text_of(markup: str) -> str:
    """The visible text of an HTML fragment, whitespace collapsed."""
    parser = _Text()
    parser.feed(markup)
    return re.sub(r"\s+", " ", html.unescape(" ".join(parser.parts))).strip()


def article(page: str) -> str:
    """A Material page's content (``<article>``), without the navigation."""
    start, end = page.index("<article"), page.index("</article>")
    return page[start:end]
