"""``render --format mermaid`` drawn for real by mermaid-cli (npm ``@mermaid-js/mermaid-cli``, pinned in
tools/node/package-lock.json) in Debian's chromium (``tools/node/puppeteer-config.json``): a diagram Mermaid cannot parse fails
here, not on the reader's screen.
"""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nsb_delays.components.model.rabbitmq.names import delay_level_name, delivery_exchange_name
from nsb_delays.infra.render import render
from nsb_delays.stack.config import load_stack
from tests.packaging.conftest import DEV_STACK, PROJECT, STACKS, mermaid_cli, run

SVG = "{http://www.w3.org/2000/svg}svg"


def draw(diagram: str, output: Path, *, check: bool = True):
    source = output.with_suffix(".mmd")
    source.write_text(diagram)
    command = [
        mermaid_cli(),
        "-p",
        PROJECT / "tools" / "node" / "puppeteer-config.json",
        "--quiet",
        "-i",
        source,
        "-o",
        output,
    ]
    return run(command, cwd=PROJECT, check=check, timeout=300)


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


@pytest.mark.parametrize(("stack_file", "generation"), [(DEV_STACK, "v2"), (STACKS / "v1.yaml", "v1")])
def test_the_stack_graph_renders_to_svg_and_png(stack_file: Path, generation: str, tmp_path: Path) -> None:
    config = load_stack(str(stack_file))
    assert config.rabbitmq is not None and config.rabbitmq.generation == generation
    diagram = render(config, "mermaid", stack_file.stem)
    draw(diagram, tmp_path / "graph.svg")
    svg = ET.parse(tmp_path / "graph.svg").getroot()
    assert svg.tag == SVG
    text = ET.tostring(svg, encoding="unicode", method="text")
    for name in (delay_level_name(27, generation), delay_level_name(0, generation)):
        assert name in text
    assert delivery_exchange_name(generation) in text
    assert all(queue in text for endpoint in config.rabbitmq.endpoints for queue in endpoint.receiving_queues)
    draw(diagram, tmp_path / "graph.png")
    width, height = png_size(tmp_path / "graph.png")
    assert width > 300 and height > width, "the 28-level chain, drawn top down"


def test_a_diagram_mermaid_cannot_parse_fails(tmp_path: Path) -> None:
    broken = render(load_stack(str(DEV_STACK)), "mermaid", "dev").replace(
        ' -->|"bit 27 = 1"| ', ' -->|"bit 27 = 1" ', 1
    )
    result = draw(broken, tmp_path / "broken.svg", check=False)
    assert result.returncode != 0
    assert "Parse error" in result.stderr
    assert not (tmp_path / "broken.svg").exists()
