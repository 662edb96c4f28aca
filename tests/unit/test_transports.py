"""The program registers, for every stack file of the repository and the docs, exactly what the program before issue 39
registered (``program_recordings.json``): the same resources, names, inputs, options, parents and dependencies."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.program_recordings import StackText, kept_recordings, record_program

KEPT = kept_recordings()


def differences(kept: list[list[str]], now: list[list[str]]) -> str:
    gone = [f"  - {entry}" for entry in kept if entry not in now]
    new = [f"  + {entry}" for entry in now if entry not in kept]
    return "\n".join([*gone, *new][:20])


@pytest.mark.parametrize("kept", KEPT, ids=[kept["label"] for kept in KEPT])
def test_the_program_registers_what_it_registered_before_the_transports(kept: dict[str, Any]) -> None:
    recorded = record_program(StackText(kept["label"], kept["stack"], kept["text"]))
    if "refused" in kept:
        assert recorded.get("refused") == kept["refused"]
        return
    assert recorded["resources"] == kept["resources"], differences(kept["resources"], recorded["resources"])
