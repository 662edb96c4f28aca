"""``--stack`` takes Pulumi's stack names, with an organization and a project (``org/prod``,
``org/project/prod``), and stack file paths: the file is ``Pulumi.<short name>.yaml``, the Pulumi CLI gets the
full name, and URNs the short one (stack/config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsb_delays.infra.commands.check import report_context
from nsb_delays.stack.config import (
    StackFileError,
    is_stack_path,
    load_stack,
    stack_file,
    stack_name,
    stack_reference,
)

STACK = "config:\n  nsb-delays:rabbitmq:\n    endpoints: [Sales]\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: nsb-delays\nruntime: python\n")
    (tmp_path / "Pulumi.prod.yaml").write_text(STACK)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("given", ["prod", "org/prod", "org/nsb-delays/prod"])
def test_a_stack_name_with_an_organization_or_project_reads_the_short_names_file(project: Path, given: str) -> None:
    assert not is_stack_path(given)
    assert stack_file(given) == project / "Pulumi.prod.yaml"
    assert stack_name(given) == "prod"
    assert stack_reference(given) == given, "the Pulumi CLI gets the full name"
    assert load_stack(given).rabbitmq is not None


def test_the_project_directory_is_found_from_a_subdirectory_for_an_org_name(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")
    assert stack_file("org/prod") == project / "Pulumi.prod.yaml"


@pytest.mark.parametrize(
    "given",
    ["Pulumi.prod.yaml", "stacks/Pulumi.prod.yml", "./prod", "../prod", "/etc/prod", "~/prod", "stacks/"],
)
def test_what_looks_like_a_path_is_a_stack_file(given: str) -> None:
    assert is_stack_path(given)


def test_an_existing_file_is_a_path_even_without_a_yaml_ending(project: Path) -> None:
    (project / "org").mkdir()
    (project / "org" / "prod").write_text(STACK)
    assert is_stack_path("org/prod")
    assert stack_file("org/prod") == Path("org/prod")


def test_a_stack_file_path_gives_its_short_name_to_the_cli(project: Path) -> None:
    assert stack_name("Pulumi.prod.yaml") == "prod"
    assert stack_reference(str(project / "Pulumi.prod.yaml")) == "prod"


@pytest.mark.parametrize("given", ["a/b/c/d", "org//prod", "/".join(["org", " ", "prod"]), "org/prod/"])
def test_a_name_pulumi_cannot_take_is_refused_naming_the_forms(project: Path, given: str) -> None:
    with pytest.raises(StackFileError) as raised:
        stack_file(given)
    message = str(raised.value)
    if given.endswith("/"):
        assert "is a directory" in message or "does not exist" in message
    else:
        assert f"--stack {given!r} is neither a stack name" in message
        assert "STACK, ORG/STACK or ORG/PROJECT/STACK" in message


def test_check_reports_the_short_name(project: Path) -> None:
    """The name that goes into URNs and the report (``check`` had a copy of ``stack_name`` of its own)."""
    assert report_context("org/nsb-delays/prod", [], 0)["stack"] == "prod"
