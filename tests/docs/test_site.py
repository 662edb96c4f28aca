"""The documentation site: it builds strictly (links and anchors checked offline), its generated references say what
the code says (every command and option, every config key the parser accepts, every policy rule with its level,
the components' docstrings), its Mermaid diagrams are drawn at build time, and it renders in headless chromium."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from nsb_delays.components.model.rabbitmq.names import delay_level_name, delivery_exchange_name
from nsb_delays.components.section.keys import config_keys
from nsb_delays.infra.cli import cli
from nsb_delays.policies.pack import POLICIES
from nsb_delays.stack import config as stack_config
from tests.docs.conftest import ARTIFACTS, Site, article, chromium, text_of

PASSWORD_KEY = "salesPassword"


def squashed(text: str) -> str:
    """Text to compare with a page's: no whitespace (the page breaks lines and spaces around markup its own way)
    and no backquotes (Markdown turns them into code)."""
    return re.sub(r"\s+", "", text.replace("`", ""))


def test_the_site_builds_strictly(site: Site, figure: Callable[[str], None]) -> None:
    assert "WARNING" not in site.log, site.log
    assert (site.root / "index.html").is_file()
    assert (site.root / "sitemap.xml").is_file()
    figure(f"docs: mkdocs build --strict in {site.seconds:.1f} s")


# --- the CLI reference --------------------------------------------------------------------------------------------


def commands(command: click.Command, ctx: click.Context, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            yield from commands(sub, click.Context(sub, parent=ctx, info_name=name), (*path, name))


def command_sections(page: str) -> dict[str, str]:
    """Each command's part of the CLI page, by its heading id (``nsb-delays-migrate-run``)."""
    parts = re.split(r'<h[1-6] id="(nsb-delays[^"]*)"', article(page))
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_cli_page_documents_every_command_and_option_with_its_help(site: Site) -> None:
    sections = command_sections(site.page("reference/cli"))
    every = list(commands(cli, click.Context(cli, info_name="nsb-delays"), ("nsb-delays",)))
    assert "nsb-delays migrate run" in dict(every), "the [spark] extra is installed: migrate registers in full"
    problems = []
    for path, command in every:
        if command.hidden:
            continue
        section = sections.get(path.replace(" ", "-"))
        if section is None:
            problems.append(f"{path}: no section")
            continue
        text = squashed(text_of(section))
        if command.help and squashed(command.help.split("\n\n")[0]) not in text:
            problems.append(f"{path}: its help text is not shown")
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            if f"<code>{param.opts[-1]}</code>" not in section:
                problems.append(f"{path} {param.opts[-1]}: not listed")
            elif param.help and squashed(param.help) not in text:
                problems.append(f"{path} {param.opts[-1]}: its help text is not shown as written: {param.help!r}")
    assert not problems, "\n".join(problems)
    assert "Sentinel" not in site.page("reference/cli")


# --- the configuration reference ----------------------------------------------------------------------------------


def config_keys_on_page(page: str) -> dict[str, list[str]]:
    """The keys of each section table of the configuration page, by the section's heading id."""
    parts = re.split(r'<h3 id="([^"]+)"', article(page))
    by_id = {section_id(section): section for section in config_keys()}
    keys: dict[str, list[str]] = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        if heading in by_id:
            keys[by_id[heading]] = re.findall(r"<tr>\s*<td><code>([^<]+)</code></td>", body)
    return keys


def section_id(section: str) -> str:
    return section.replace("[]", "").replace(".", "-")


def test_every_key_the_parser_accepts_is_on_the_configuration_page(site: Site) -> None:
    on_page = config_keys_on_page(site.page("reference/configuration"))
    accepted = {section: sorted(keys) for section, keys in config_keys().items()}
    assert {section: sorted(keys) for section, keys in on_page.items()} == accepted


def example_value(section: str, key: str) -> Any:
    """A value of the key's type from the parser's own table (the first allowed value where it has a list)."""
    typ, allowed = config_keys()[section][key].type, config_keys()[section][key].allowed
    special: dict[str, Any] = {
        stack_config.BROKER_VERSION_KEY: "4.0",
        "transportVersion": "11.2.1",
        "user": {"passwordKey": PASSWORD_KEY},
        "passwordKey": PASSWORD_KEY,
        "endpoints": ["Sales"],
    }
    if key in special:
        return special[key]
    if allowed:
        return allowed[0]
    return {bool: True, int: 345600, list: [], str: "Orders"}[typ]


# Keys that take effect only beside another: the smallest config of each gives the other too.
COMPANIONS: dict[str, dict[str, Any]] = {"graphStack": {"declaresGraph": False}}


def config_with(section: str, key: str) -> dict[str, Any]:
    """The smallest stack config that gives ``key`` of ``section`` a value."""
    value = example_value(section, key)
    top, _, below = section.partition(".")
    raw: dict[str, Any] = {top: {"endpoints": ["Sales"]} if "endpoints" in config_keys()[top] else {}}
    if below == "":
        raw[top] |= COMPANIONS.get(key, {}) | {key: value}
    elif below == "endpoints[]":
        raw[top]["endpoints"] = [{"name": "Sales", key: value}]
    elif below == "endpoints[].user":
        user = {"passwordKey": PASSWORD_KEY, key: value}
        raw[top]["endpoints"] = [{"name": "Sales", "user": user}]
    else:
        raise AssertionError(f"a section the test does not know: {section}")
    if "user" in str(raw):
        raw[PASSWORD_KEY] = {"secure": "v1:encrypted"}
    return raw


def test_every_key_on_the_configuration_page_is_accepted(site: Site) -> None:
    on_page = config_keys_on_page(site.page("reference/configuration"))
    refused = {}
    for section, keys in on_page.items():
        for key in keys:
            try:
                stack_config.parse_stack_config(config_with(section, key))
            except stack_config.ConfigError as error:
                refused[f"{section}.{key}"] = error.problems
    assert not refused


def test_a_key_the_parser_refuses_is_refused_by_the_probe() -> None:
    """The probe above can fail: a key no table has is an unknown key."""
    with pytest.raises(stack_config.ConfigError, match="unknown key"):
        stack_config.parse_stack_config({"rabbitmq": {"endpoints": ["Sales"], "notAKey": True}})


# --- the policy rules, the components -----------------------------------------------------------------------------


def test_the_policy_page_lists_every_rule_with_its_level_and_description(site: Site) -> None:
    rows = {
        name: text_of(row)
        for name, row in re.findall(
            r'<tr>\s*<td><span id="([^"]+)"></span>(.*?)</tr>', site.page("reference/policies"), re.S
        )
    }
    assert list(rows) == [policy.name for policy in POLICIES]
    for policy in POLICIES:
        level = policy.enforcement_level.value if policy.enforcement_level else "advisory"
        assert f" {level} " in f" {rows[policy.name]} ", policy.name
        assert squashed(policy.description) in squashed(rows[policy.name]), policy.name
    options = text_of(site.page("reference/policies").split('id="rule-options"')[1])
    for policy in POLICIES:
        for option in policy.config_schema.properties if policy.config_schema else {}:
            assert f"{policy.name} {option}" in options


def test_the_components_page_shows_each_components_docstring(site: Site) -> None:
    from nsb_delays.components import rabbitmq, sqs

    page = site.page("reference/components")
    text = squashed(text_of(article(page)))
    for component in (
        rabbitmq.RabbitMqDelayInfrastructure,
        rabbitmq.RabbitMqEndpoint,
        rabbitmq.RabbitMqSharedQueues,
        rabbitmq.RabbitMqEndpointUser,
        sqs.SqsEndpoint,
    ):
        assert f'id="{component.__module__}.{component.__name__}"' in page
        assert component.__doc__ is not None
        first = squashed(component.__doc__.split("\n\n")[0].replace("``", ""))
        assert first in text, component.__name__
    assert 'id="nsb_delays.components.model.rabbitmq.names.delay_level_name"' in page
    assert 'id="nsb_delays.components.model.permissions"' in page


# --- diagrams ------------------------------------------------------------------------------------------------------


def test_every_mermaid_diagram_is_drawn_at_build_time(site: Site) -> None:
    pages = {path: path.read_text(encoding="utf-8") for path in site.root.rglob("*.html")}
    assert not [str(path) for path, page in pages.items() if "language-mermaid" in page or "mermaid.min.js" in page]
    drawn = sorted((site.root / "assets" / "diagrams").glob("*.svg"))
    assert drawn
    for svg in drawn:
        assert ET.parse(svg).getroot().tag == "{http://www.w3.org/2000/svg}svg"
        assert any(svg.name in page for page in pages.values()) or "dev-stack" in svg.read_text()


def test_the_dev_stack_graph_is_drawn_from_render_and_shown_instead_of_the_committed_png(site: Site) -> None:
    graph = site.root / "assets" / "dev-stack-graph.svg"
    text = ET.tostring(ET.parse(graph).getroot(), encoding="unicode", method="text")
    for name in (delay_level_name(27, "v2"), delay_level_name(0, "v2"), delivery_exchange_name("v2")):
        assert name in text
    pages = {str(path.relative_to(site.root)): path.read_text() for path in site.root.rglob("*.html")}
    assert not [page for page, markup in pages.items() if "dev-stack-graph.png" in markup]
    assert not (site.root / "dev-stack-graph.png").exists()


# --- in a browser --------------------------------------------------------------------------------------------------


def test_the_home_page_navigation_and_a_generated_page_render_in_chromium(
    site: Site, served: str, tmp_path: Path
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "docs-home.png"
    screenshot.unlink(missing_ok=True)
    chromium("--window-size=1280,1600", f"--screenshot={screenshot}", served, cwd=tmp_path)
    assert screenshot.stat().st_size > 10_000
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    home = chromium("--dump-dom", served, cwd=tmp_path).stdout
    nav = text_of(home[home.index('<nav class="md-nav md-nav--primary"') :])
    for section in ("Tutorials", "How-to guides", "Concepts", "Reference", "Measurements"):
        assert section in nav
    for page in ("Command line", "Stack configuration", "Components API", "Policy rules"):
        assert page in nav

    reference = chromium("--dump-dom", f"{served}reference/configuration/", cwd=tmp_path).stdout
    content = text_of(article(reference))
    assert "nsb-delays:rabbitmq" in content and "brokerVersion" in content and "passwordKey" in content
    assert 'class="md-nav__link md-nav__link--active"' in reference or "md-nav__link--active" in reference
