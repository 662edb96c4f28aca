"""``nsb-delays discover --format terraform -o DIR`` without a broker: the module of the discovered stack, as ``render
--format terraform`` writes it, with an ``import`` block for each object the broker holds as the stack declares it,
at the address the module gives that resource, with the id the provider parses; the option rules refused before the
broker is read. (A real ``tofu`` plans and applies it against NServiceBus's objects: tests/engine/
test_discover_terraform.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import pytest
import yaml
from click.testing import CliRunner

from nsb_delays.components.model.rabbitmq.names import DEFAULT_AUDIT_QUEUE, DEFAULT_ERROR_QUEUE
from nsb_delays.components.resource_types import RABBITMQ_BINDING, RABBITMQ_EXCHANGE, RABBITMQ_QUEUE
from nsb_delays.infra.cli import cli
from nsb_delays.infra.commands.discover import Adoption, adoption, report, review_lines
from nsb_delays.infra.render.documents import topology_definitions
from nsb_delays.infra.render.terraform import (
    IMPORTS_FILE,
    MANIFEST,
    TerraformModule,
    adopted_before,
    resource_type,
    terraform_module,
    write_module,
)
from nsb_delays.stack.config import StackConfig, parse_stack_config
from nsb_delays.stack.discovery import Discovery, discover
from tests.bad_inputs import CLEAN_ENVIRONMENT
from tests.unit.test_adoption import without
from tests.unit.test_bad_inputs import HTTP_DOWN
from tests.unit.test_discovery import ENDPOINTS, VHOST, definitions, section

REFERENCE_PREFIX = "${"


def discovered(estate: dict[str, Any], users: bool = True) -> tuple[Discovery, StackConfig, Adoption, TerraformModule]:
    found = discover(estate, vhost=VHOST, broker_version="4.0", users=users)
    config = found.stack_config("prod")
    assert config.rabbitmq is not None
    adopted = adoption(config.rabbitmq, estate, Path("module"))
    return found, config, adopted, terraform_module(config, "prod", adopted.present)


def resources(module: TerraformModule) -> dict[str, dict[str, Any]]:
    """Every resource block of the module by its address."""
    found: dict[str, dict[str, Any]] = {}
    for text in (text for name, text in module.files.items() if name.endswith(".tf.json")):
        for kind, named in json.loads(text).get("resource", {}).items():
            found |= {f"{kind}.{name}": body for name, body in named.items()}
    return found


def import_blocks(module: TerraformModule) -> dict[str, str]:
    return {block["to"]: block["id"] for block in json.loads(module.files[IMPORTS_FILE])["import"]}


def name_of(value: str, blocks: dict[str, dict[str, Any]]) -> str:
    """A block's string as the broker's name: a reference (``${rabbitmq_queue.x.name}``) as that resource's name."""
    if value.startswith(REFERENCE_PREFIX):
        address = value.removeprefix(REFERENCE_PREFIX).removesuffix(".name}")
        return str(blocks[address]["name"])
    return value


def parsed_as_the_provider_parses(kind: str, found: str) -> dict[str, str]:
    """cyrilgdn/terraform-provider-rabbitmq v1.8.0: ``rabbitmq/util.go`` ``parseId`` (split on ``@``, exactly two
    parts) for a queue, exchange or policy; ``resource_binding.go`` ``ReadBinding`` (split on ``/``, the vhost
    ``percentDecodeSlashes``'d) for a binding."""
    if kind == "rabbitmq_binding":
        parts = found.split("/")
        assert len(parts) == 5, found
        vhost = parts[0].replace("%2F", "/").replace("%25", "%")
        return {"vhost": vhost, "source": parts[1], "destination": parts[2], "destination_type": parts[3],
                "properties_key": parts[4]}  # fmt: skip
    parts = found.split("@")
    assert len(parts) == 2, found
    return {"name": parts[0], "vhost": parts[1]}


@pytest.mark.parametrize("vhost", [VHOST, "/"])
def test_each_import_block_is_at_an_address_of_the_module_with_the_id_the_provider_parses(vhost: str) -> None:
    declared = parse_stack_config({"rabbitmq": section(endpoints=ENDPOINTS) | {"vhost": vhost}}).rabbitmq
    assert declared is not None
    estate = topology_definitions(declared.topology, vhost)
    found = discover(estate, vhost=vhost, broker_version="4.0")
    config = found.stack_config("prod")
    assert config.rabbitmq is not None
    adopted = adoption(config.rabbitmq, estate)
    module = terraform_module(config, "prod", adopted.present)
    blocks, imports = resources(module), import_blocks(module)
    assert imports and set(imports) <= set(blocks), sorted(set(imports) - set(blocks))
    # every object the broker holds as declared is imported, once: the module's record of what it imports
    assert sorted(module.imports.values()) == sorted(adopted.present)
    assert {address: found for address, (_, found) in module.imports.items()} == imports
    for address, found_id in imports.items():
        kind, body = address.split(".", 1)[0], blocks[address]
        parsed = parsed_as_the_provider_parses(kind, found_id)
        assert parsed["vhost"] == body["vhost"] == vhost, address
        if kind == "rabbitmq_binding":
            assert parsed["source"] == name_of(body["source"], blocks), address
            assert parsed["destination"] == name_of(body["destination"], blocks), address
            assert parsed["destination_type"] == body["destination_type"], address
            routing_key = body.get("routing_key", "")
            assert unquote_plus(parsed["properties_key"]) == routing_key or (
                parsed["properties_key"] == "~" and not routing_key
            ), address
        else:
            assert parsed["name"] == body["name"], address


def test_the_module_is_the_one_render_writes_of_the_same_stack() -> None:
    """``adoptExisting`` changes no input: the discovered module, imports aside, is the stack's render."""
    _, config, _, module = discovered(definitions(section(endpoints=ENDPOINTS)))
    rendered = terraform_module(config, "prod")
    assert set(module.files) - set(rendered.files) == {IMPORTS_FILE}
    for name, text in rendered.files.items():
        assert module.files[name] == text, name  # the same text: a render is the same each time
    assert module.retained == rendered.retained and rendered.imports == {}


def test_what_the_broker_lacks_is_created_not_imported_and_the_review_says_so_for_the_module() -> None:
    whole = definitions(section(endpoints=ENDPOINTS))
    estate = whole
    for name in (DEFAULT_ERROR_QUEUE, DEFAULT_AUDIT_QUEUE):
        estate = without(without(estate, "exchanges", name=name), "bindings", source=name)
    found, _, adopted, module = discovered(estate)
    _, _, _, complete = discovered(whole)
    lacking = set(import_blocks(complete)) - set(import_blocks(module))
    assert {address.split(".", 1)[0] for address in lacking} == {"rabbitmq_exchange", resource_type(RABBITMQ_BINDING)}
    assert len(lacking) == 4 and set(import_blocks(module)) < set(import_blocks(complete))
    assert all(address in resources(module) for address in lacking)  # declared, so created by the first apply
    review = review_lines(found, adopted, None, Path("module"))
    assert review[0] == (
        f"not on the broker, created by the first apply of the module in module (its {IMPORTS_FILE} imports the "
        "rest): exchange error, exchange audit, binding error -> queue error, binding audit -> queue audit"
    )
    assert not [line for line in review if "adoptExisting" in line or "pulumi" in line]


def test_a_conflict_is_left_out_of_the_import_blocks_and_named_for_the_module() -> None:
    whole = definitions(section(endpoints=["Sales"]))
    estate = whole | {
        "queues": [q | {"arguments": {**q["arguments"], "x-max-length": 1000}} if q["name"] == "error" else q
                   for q in whole["queues"]]}  # fmt: skip
    _, _, adopted, module = discovered(estate, users=False)
    assert (RABBITMQ_QUEUE, f"error@{VHOST}") not in module.imports.values()
    assert (RABBITMQ_EXCHANGE, f"error@{VHOST}") in module.imports.values()  # the exchange of the same id is imported
    (line,) = adopted.conflicts
    assert line.startswith("cannot adopt queue error as it is: the broker has arguments.x-max-length 1000")
    assert f"(left out of module/{IMPORTS_FILE}; the apply can neither import it nor declare it over" in line


def test_a_render_after_the_review_keeps_the_imports_of_what_the_stack_still_declares(tmp_path: Path) -> None:
    """The review edits the stack file, and the module is rendered again: imports of objects the stack still declares
    with the same id stay; those of an endpoint the review dropped go, with the file once none is left."""
    _, config, _, module = discovered(definitions(section(endpoints=ENDPOINTS)), users=False)
    directory = tmp_path / "module"
    write_module(directory, module)
    adopted = adopted_before(directory)
    assert adopted is not None and sorted(adopted) == sorted(module.imports.values())
    assert config.rabbitmq is not None
    kept = [e for e in section(endpoints=ENDPOINTS)["endpoints"] if (e if isinstance(e, str) else e["name"]) != "Sales"]
    reviewed = config.with_values("rabbitmq", endpoints=kept)
    again = terraform_module(reviewed, "prod", adopted)
    write_module(directory, again)
    imports = import_blocks(again)
    assert imports and set(imports) < set(import_blocks(module)) and set(imports) <= set(resources(again))
    assert not [found for found in imports.values() if "Sales" in found]
    assert (
        json.loads((directory / IMPORTS_FILE).read_text())["import"] == json.loads(again.files[IMPORTS_FILE])["import"]
    )
    write_module(directory, terraform_module(reviewed.with_values("rabbitmq", endpoints=["Billing"]), "prod", []))
    assert not (directory / IMPORTS_FILE).exists() and adopted_before(directory) is None


LOGIN = ["--management-url", HTTP_DOWN, "--username", "guest", "--password", "guest"]


@pytest.mark.parametrize(
    ("args", "files", "expected"),
    [
        (["--format", "terraform"], {}, ["--format terraform writes a directory: give -o DIR"]),
        (["--format", "terraform", "-o", "module", "--import-file", "import.json"], {},
         ["--import-file is --format pulumi's `pulumi import` document: --format terraform writes its import blocks "
          f"into -o DIR ({IMPORTS_FILE})"]),
        (["-o", "module"], {}, ["-o applies only to --format terraform (the module's directory)"]),
        (["--format", "terraform", "-o", "module"], {"module/main.tf": "# someone's"},
         [f"-o module: not empty and not a module nsb-delays rendered (no {MANIFEST})"]),
        (["--format", "terraform", "-o", "module"], {"module": "a file"},
         ["-o module: is a file; give a directory (created if missing)"]),
        (["--format", "terraform", "--stack", "prod"], {"Pulumi.prod.yaml": "config: {}\n"},
         ["Pulumi.prod.yaml exists: pass --force to overwrite it", "--format terraform writes a directory"]),
    ],
    ids=["no-output", "import-file", "output-without-terraform", "foreign-directory", "file", "all-at-once"],
)  # fmt: skip
def test_each_rule_is_refused_before_the_broker_is_read_and_nothing_is_written(
    args: list[str], files: dict[str, str], expected: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    before = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))
    result = CliRunner().invoke(cli, ["discover", *LOGIN, *args], env=CLEAN_ENVIRONMENT)
    assert result.exit_code == 2, result.output
    for text in expected:
        assert text in result.output, result.output
    assert "cannot reach" not in result.output  # refused before the broker is read
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")) == before


def test_the_help_says_how_the_format_goes_with_the_import_file() -> None:
    result = CliRunner().invoke(cli, ["discover", "--help"], env=CLEAN_ENVIRONMENT, terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "--format [pulumi|terraform]" in text and "--import-file is --format pulumi's" in text
    assert IMPORTS_FILE in text and "-o, --output" in text


def test_the_next_lines_are_tofus_with_each_password_as_a_variable(capsys: pytest.CaptureFixture[str]) -> None:
    found, config, adopted, _ = discovered(definitions(section(endpoints=["Billing", "Sales"])))
    assert config.rabbitmq is not None
    report(found, config.rabbitmq.endpoints, "prod", None, review_lines(found, adopted, None, Path("module")),
           Path("module"))  # fmt: skip
    printed = capsys.readouterr().err
    assert "wrote Pulumi.prod.yaml\nwrote module\n" in printed
    assert (
        "next: tofu -chdir=module init, then tofu -chdir=module plan -var billing_password=<password> "
        "-var sales_password=<password> (imports and creates)"
    ) in printed
    assert "pulumi" not in printed


def test_render_over_the_discovered_module_keeps_its_import_blocks(tmp_path: Path) -> None:
    """``render --format terraform -o DIR`` of the reviewed stack file, over what discover wrote: the same module, the
    same import blocks (``render_module`` reads what the directory imports: ``adopted_before``)."""
    found, _, _, module = discovered(definitions(section(endpoints=ENDPOINTS)))
    directory, stack_file = tmp_path / "module", tmp_path / "Pulumi.prod.yaml"
    write_module(directory, module)
    document = {"config": found.stack_file_config(None) | {f"nsb-delays:{key}": {"secure": "v1:cA=="}
                                                          for key in found.password_keys}}  # fmt: skip
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False))
    result = CliRunner().invoke(cli, ["render", "--stack", str(stack_file), "--format", "terraform", "-o",
                                      str(directory)], env=CLEAN_ENVIRONMENT)  # fmt: skip
    assert result.exit_code == 0, result.output
    for name, text in module.files.items():
        assert (directory / name).read_text() == text, name
