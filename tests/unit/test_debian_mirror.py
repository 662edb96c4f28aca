"""The RabbitMQ chroots' Debian mirror comes from the machine's apt sources (servers/debian_mirror.py), both the
one-line ``.list`` format and deb822 ``.sources``, so a machine behind its own mirror builds them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from servers import PROJECT
from servers.debian_mirror import FALLBACK_MIRROR, apt_mirror, debian_mirror

# Debian 12's own file as a cloud image ships it, and a company mirror before it.
DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example.internal/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
"""


def apt_etc(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_deb822_sources_file(tmp_path: Path) -> None:
    assert apt_mirror(apt_etc(tmp_path, {"sources.list.d/debian.sources": DEB822})) == (
        "http://mirror.example.internal/debian"
    )


def test_a_one_line_list_with_options_after_security_and_other_software(tmp_path: Path) -> None:
    sources = """\
# deb http://commented.example/debian bookworm main
deb-src http://source.example/debian bookworm main
deb http://security.debian.org/debian-security bookworm-security main
deb [signed-by=/usr/share/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt cloud-sdk-bookworm main
deb [ arch=amd64 signed-by=/k.gpg ] http://apt.example.internal/debian/ bookworm main contrib
"""
    assert apt_mirror(apt_etc(tmp_path, {"sources.list": sources})) == "http://apt.example.internal/debian"


def test_sources_list_is_read_before_the_parts_and_the_parts_in_name_order(tmp_path: Path) -> None:
    etc = apt_etc(
        tmp_path,
        {
            "sources.list": "deb http://first.example/debian trixie main\n",
            "sources.list.d/a.sources": DEB822,
        },
    )
    assert apt_mirror(etc) == "http://first.example/debian"
    (etc / "sources.list").write_text("# moved to deb822\n")
    (etc / "sources.list.d/0-nodesource.sources").write_text(
        "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: main\n"
    )
    (etc / "sources.list.d/z.list").write_text("deb http://last.example/debian sid main\n")
    assert apt_mirror(etc) == "http://mirror.example.internal/debian"


def test_disabled_stanzas_and_files_apt_does_not_read_are_left_out(tmp_path: Path) -> None:
    etc = apt_etc(
        tmp_path,
        {
            "sources.list.d/a.sources": "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\n"
            "Suites: bookworm\nComponents: main\n",
            "sources.list.d/b.list.disabled": "deb http://ignored.example/debian bookworm main\n",
            "sources.list.d/c.list": "deb http://no-main.example/debian bookworm contrib\n",
        },
    )
    assert apt_mirror(etc) is None
    assert debian_mirror({}, etc) == FALLBACK_MIRROR


def test_debian_mirror_overrides_the_apt_sources(tmp_path: Path) -> None:
    etc = apt_etc(tmp_path, {"sources.list.d/debian.sources": DEB822})
    assert debian_mirror({"DEBIAN_MIRROR": "http://given.example/debian"}, etc) == "http://given.example/debian"
    assert debian_mirror({"DEBIAN_MIRROR": ""}, etc) == "http://mirror.example.internal/debian"


def test_the_makefile_runs_it_with_the_system_python_outside_any_venv() -> None:
    """``python3 servers/debian_mirror.py``, as the root targets run it: one URL, exit 0."""
    result = subprocess.run(
        [sys.executable, "-I", str(PROJECT / "servers" / "debian_mirror.py")],
        capture_output=True,
        text=True,
        check=True,
        env={"DEBIAN_MIRROR": "http://given.example/debian"},
    )
    assert result.stdout == "http://given.example/debian\n"
