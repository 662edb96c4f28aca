"""The Debian mirror the RabbitMQ chroots (``make rabbitmq4-root``, ``make rabbitmq43-root``) are built from: the one
this machine's apt already uses, so a machine behind its own mirror builds them without reaching deb.debian.org.

``python3 servers/debian_mirror.py`` prints it: ``DEBIAN_MIRROR`` when set, else the first Debian archive among the
apt sources (``/etc/apt/sources.list``, then ``/etc/apt/sources.list.d/*.list`` and ``*.sources`` in name order, as
apt reads them: sources.list(5)), else ``http://deb.debian.org/debian``. A Debian archive is an enabled ``deb``
entry with the ``main`` component and a Debian suite (a release codename or ``stable``/``testing``/``unstable``
...); ``-security``, ``-updates`` and ``-backports`` suites are other archives, and other software's repositories
(nodesource's ``nodistro``, ``cloud-sdk-bookworm``) are not Debian's. Standard library only: the Makefile runs it
with the system's ``python3`` before any venv exists.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

FALLBACK_MIRROR = "http://deb.debian.org/debian"
APT_ETC = Path("/etc/apt")
# Debian's release codenames (Toy Story characters) and its suite aliases: the suites a Debian archive serves.
DEBIAN_SUITES = frozenset(
    [
        "buzz",
        "rex",
        "bo",
        "hamm",
        "slink",
        "potato",
        "woody",
        "sarge",
        "etch",
        "lenny",
        "squeeze",
        "wheezy",
        "jessie",
        "stretch",
        "buster",
        "bullseye",
        "bookworm",
        "trixie",
        "forky",
        "duke",
        "sid",
        "stable",
        "testing",
        "unstable",
        "oldstable",
        "oldoldstable",
        "experimental",
    ]
)
# Suites of the same release served by other archives (debian-security) or holding only updates.
OTHER_ARCHIVE_SUFFIXES = ("-security", "-updates", "-backports", "-backports-sloppy", "-proposed-updates")


def source_files(apt_etc: Path = APT_ETC) -> list[Path]:
    """The apt source files in the order apt reads them."""
    files = [apt_etc / "sources.list"] if (apt_etc / "sources.list").is_file() else []
    parts = apt_etc / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources") and p.is_file())
    return files


def one_line_entries(text: str) -> Iterator[tuple[list[str], list[str], list[str]]]:
    """``deb [options] URI SUITE COMPONENT...`` lines of a ``.list`` file as (URIs, suites, components)."""
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options: "[arch=amd64 signed-by=...]" or "[ arch=amd64 ]"
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 3:
            yield [words[0]], [words[1]], words[2:]


def deb822_entries(text: str) -> Iterator[tuple[list[str], list[str], list[str]]]:
    """The stanzas of a deb822 ``.sources`` file as (URIs, suites, components); disabled ones left out."""
    for stanza in _stanzas(text):
        if "deb" not in stanza.get("types", "").split() or stanza.get("enabled", "yes").lower() == "no":
            continue
        yield stanza.get("uris", "").split(), stanza.get("suites", "").split(), stanza.get("components", "").split()


def _stanzas(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    key = None
    for line in [*text.splitlines(), ""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, None
        elif line[0].isspace() and key is not None:  # a folded continuation line
            fields[key] += " " + line.strip()
        elif ":" in line:
            name, value = line.split(":", 1)
            key = name.strip().lower()
            fields[key] = value.strip()


def is_debian_suite(suite: str) -> bool:
    return suite.strip("/") in DEBIAN_SUITES and not suite.endswith(OTHER_ARCHIVE_SUFFIXES)


def apt_mirror(apt_etc: Path = APT_ETC) -> str | None:
    """The first Debian archive among this machine's apt sources (module docstring), or None."""
    for path in source_files(apt_etc):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        entries = deb822_entries(text) if path.suffix == ".sources" else one_line_entries(text)
        for uris, suites, components in entries:
            if "main" in components and any(is_debian_suite(s) for s in suites) and uris:
                return uris[0].rstrip("/")
    return None


def debian_mirror(environ: dict[str, str] | None = None, apt_etc: Path = APT_ETC) -> str:
    """``DEBIAN_MIRROR`` when set, else the apt sources' Debian archive, else deb.debian.org."""
    override = (os.environ if environ is None else environ).get("DEBIAN_MIRROR", "").strip()
    return override or apt_mirror(apt_etc) or FALLBACK_MIRROR


if __name__ == "__main__":
    print(debian_mirror())
    sys.exit(0)
