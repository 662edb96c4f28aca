"""The component provider through the real engine: Pulumi YAML and TypeScript programs declare the components on
the broker exactly as the Python components do.

``component_programs/{yaml,typescript,python}`` declare the same components with the same names and arguments.
The YAML and TypeScript programs reach them through the provider (``packages:`` in their ``Pulumi.yaml``): the
engine starts ``components/executable/pulumi-resource-nsb-delays``, the executable form of the plugin (the
Python host built here cannot start a plugin directory, see that script), asks it for the schema and calls
``Construct`` for each component. Each program goes up into a vhost of its own; afterwards every vhost holds the
same objects, every stack the same resources (types, names, parents, inputs as the provider checked them,
protection) and outputs, and a preview shows no changes.

What the language hosts built here (``tools/engine/``) cannot do, so the programs do it themselves:
``pulumi package add`` of the plugin fetches the schema and generates the YAML package declaration, then stops
at its last step: ``pulumi-language-yaml`` v1.25.0 has no ``Link`` ("method Link not implemented"); the
``packages:`` entry is what that step writes. ``pulumi package gen-sdk --language nodejs`` needs the host's
``GeneratePackage``, which ``pulumi-language-nodejs`` v3.68.0 does not have ("method GeneratePackage not
implemented"), so ``index.ts`` writes out the three remote component classes a generated SDK would hold.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from nsb_delays.brokers.management import ManagementApi
from nsb_delays.components.model.rabbitmq.delivery_limits import DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION
from nsb_delays.components.model.rabbitmq.names import LEVEL_COUNT, delivery_exchange_name
from nsb_delays.components.provider import COMPONENTS, PACKAGE
from nsb_delays.infra.pulumi_engine import provider_credentials
from servers.rabbitmq import LocalRabbitMq
from tests.conftest import unavailable
from tests.docs.examples import blocks_run_in
from tests.docs.live import PULUMI_YAML, missing_lines
from tests.engine.conftest import ROOT, PulumiEngine, Stack, init_stack, remove_stack

PROGRAMS = Path(__file__).parent / "component_programs"
OTHER_LANGUAGES_PAGE = ROOT / "docs" / "how-to" / "other-languages.md"
PLUGIN_EXECUTABLE = ROOT / "components" / "executable" / f"pulumi-resource-{PACKAGE}"
DEFINITION_KINDS = ("queues", "exchanges", "bindings", "policies")


@dataclass
class Twin:
    stack: Stack
    vhost: str


OTHER_LANGUAGES = ("yaml", "typescript")
LANGUAGE_HOSTS = {"yaml": "pulumi-language-yaml", "typescript": "pulumi-language-nodejs"}


def require_language_hosts(engine: PulumiEngine) -> None:
    """The hosts ``tools/engine/build.sh`` builds (a user's Pulumi install has them) and ``@pulumi/pulumi`` from
    tools/node/package.json (``make setup``; ./node_modules links to them); without them skip, and fail under CI=true."""
    missing = [
        host for host in LANGUAGE_HOSTS.values() if shutil.which(host, path=str(engine.cli.executable.parent)) is None
    ]
    if not (ROOT / "node_modules" / "@pulumi" / "pulumi" / "package.json").exists():
        missing.append("@pulumi/pulumi in node_modules")
    if engine.cli.built and missing:
        unavailable(f"not built or installed: {', '.join(missing)} (run `make setup`; tools/engine/build.sh says why)")


@pytest.fixture(scope="module")
def twins(
    rabbitmq: LocalRabbitMq, broker_version, module_vhost, engine: PulumiEngine, tmp_path_factory
) -> Iterator[dict[str, Twin]]:
    """The three programs, each up in a vhost of its own with the same settings."""
    require_language_hosts(engine)
    made: dict[str, Twin] = {}
    try:
        for language in (*OTHER_LANGUAGES, "python"):
            vhost = module_vhost(f"components-{language}")
            stack = init_stack(
                engine, rabbitmq, tmp_path_factory.mktemp(language), f"components-{language}", PROGRAMS / language
            )
            made[language] = Twin(stack, vhost)  # removed afterwards even when its up fails
            stack.write_config(
                {
                    "rabbitmq:endpoint": rabbitmq.management_url,
                    "nsb-delays-components:vhost": vhost,
                    # with its patch level: Pulumi YAML would turn "3.10" from config into the number 3.1
                    "nsb-delays-components:brokerVersion": ".".join(map(str, broker_version[:2])) + ".0",
                    "nsb-delays-components:deliveryLimitPolicies": broker_version
                    >= DELIVERY_LIMIT_POLICY_MINIMUM_BROKER_VERSION,
                }
            )
            stack.up()
        yield made
    finally:
        for twin in made.values():
            remove_stack(twin.stack)


def broker_objects(management: ManagementApi, vhost: str) -> dict[str, list[str]]:
    definitions = management.definitions(vhost)
    return {
        kind: sorted(
            json.dumps({k: v for k, v in item.items() if k != "vhost"}, sort_keys=True) for item in definitions[kind]
        )
        for kind in DEFINITION_KINDS
    }


def stack_command(stack: Stack, *args: str) -> str:
    """``pulumi stack ARGS`` of the stack (these take no ``--config-file``): its stdout."""
    return stack.engine.run("stack", *args, "--stack", stack.name, cwd=stack.project_dir).stdout


def stack_resources(twin: Twin) -> list[str]:
    """The stack's resources as the engine recorded them, with the stack's name and vhost left out."""
    state = json.loads(stack_command(twin.stack, "export"))
    comparable = []
    for resource in state["deployment"]["resources"]:
        if resource["type"].startswith("pulumi:"):
            continue  # the stack itself and the default provider: named after the stack
        kept = {key: resource.get(key) for key in ("urn", "type", "parent", "inputs", "protect", "custom")}
        comparable.append(
            json.dumps(kept, sort_keys=True).replace(twin.stack.name, "<stack>").replace(twin.vhost, "<vhost>")
        )
    return sorted(comparable)


def test_the_engine_gets_the_schema_from_the_plugin(engine: PulumiEngine) -> None:
    result = engine.run("package", "get-schema", str(PLUGIN_EXECUTABLE))
    schema = json.loads(result.stdout)
    assert schema["name"] == PACKAGE
    assert set(schema["resources"]) == {f"{PACKAGE}:index:{component.__name__}" for component in COMPONENTS}
    assert len(COMPONENTS) == 8


@pytest.mark.parametrize("language", OTHER_LANGUAGES)
def test_the_program_puts_on_the_broker_what_the_python_program_does(
    twins: dict[str, Twin], management: ManagementApi, language: str
) -> None:
    objects = broker_objects(management, twins[language].vhost)
    assert len(objects["queues"]) > LEVEL_COUNT
    assert objects == broker_objects(management, twins["python"].vhost)


@pytest.mark.parametrize("language", OTHER_LANGUAGES)
def test_the_program_declares_the_resources_the_python_program_declares(twins: dict[str, Twin], language: str) -> None:
    declared = stack_resources(twins[language])
    assert any('"protect": true' in resource for resource in declared), "the delay levels are protected"
    assert declared == stack_resources(twins["python"])


@pytest.mark.parametrize("language", OTHER_LANGUAGES)
def test_the_outputs_reach_the_program(twins: dict[str, Twin], language: str) -> None:
    outputs = json.loads(stack_command(twins[language].stack, "output", "--json"))
    assert outputs["deliveryExchange"] == delivery_exchange_name("v2")
    assert outputs == json.loads(stack_command(twins["python"].stack, "output", "--json"))


@pytest.mark.parametrize("language", OTHER_LANGUAGES)
def test_a_preview_after_up_shows_no_changes(twins: dict[str, Twin], language: str) -> None:
    twins[language].stack.preview("--expect-no-changes")


@pytest.fixture
def preview_stack(engine: PulumiEngine, tmp_path: Path) -> Iterator[Callable[[Path, str], Stack]]:
    """``preview_stack(project, broker_version)``: a stack of a copy of the YAML program whose provider endpoint is
    never called (previews create nothing)."""
    require_language_hosts(engine)
    made: list[Stack] = []

    def make(plugin_folder: Path, broker_version: str) -> Stack:
        project = tmp_path / f"project-{len(made)}"
        shutil.copytree(PROGRAMS / "yaml", project)
        manifest = yaml.safe_load((project / "Pulumi.yaml").read_text())
        manifest["packages"] = {PACKAGE: str(plugin_folder)}
        (project / "Pulumi.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        name = f"preview-{len(made)}"
        credentials = provider_credentials("guest", "guest")
        made.append(Stack(engine, name, project, tmp_path / f"Pulumi.{name}.yaml", credentials))
        made[-1].write_config(
            {
                "rabbitmq:endpoint": "http://127.0.0.1:9",
                "nsb-delays-components:vhost": "/",
                "nsb-delays-components:brokerVersion": broker_version,
                "nsb-delays-components:deliveryLimitPolicies": True,
            }
        )
        engine.run("stack", "init", name, cwd=project)
        return made[-1]

    yield make
    for stack in made:
        remove_stack(stack)


def test_the_plugin_written_for_an_installed_package_serves_a_yaml_program(
    preview_stack: Callable[[Path, str], Stack], tmp_path: Path
) -> None:
    """``nsb-delays pulumi-plugin provider DIR`` writes the executable form too."""
    plugin = tmp_path / "plugin"
    subprocess.run(
        [sys.executable, "-m", "nsb_delays.infra.cli", "pulumi-plugin", "provider", str(plugin)],
        check=True,
        capture_output=True,
    )
    result = preview_stack(plugin / "executable", "4.0.0").preview()
    assert f"{PACKAGE}:index:RabbitMqEndpoint" in result.stdout
    assert "error" not in result.stderr.lower(), result.explain()


def test_a_number_where_a_string_belongs_is_refused_naming_the_input(
    preview_stack: Callable[[Path, str], Stack],
) -> None:
    """other-languages.md's block (``runs-with: pulumi-yaml``): ``"3.10"`` in a YAML program's config arrives as the
    number 3.1; the page's command prints the page's error (naming the component, the input and the way out), no
    Python traceback, nothing created (a preview). The program keeps only the page's component, ``delays``: the
    engine stops at the first component that fails, and the order of independent ones is not fixed."""
    (block,) = blocks_run_in(PULUMI_YAML, [OTHER_LANGUAGES_PAGE])
    command = shlex.split(block.output_of or "")
    assert command[:1] == ["pulumi"], block.where
    stack = preview_stack(PLUGIN_EXECUTABLE.parent, "3.10")
    manifest = yaml.safe_load((stack.project_dir / "Pulumi.yaml").read_text())
    manifest["resources"] = {"delays": manifest["resources"]["delays"]}
    (stack.project_dir / "Pulumi.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert yaml.safe_load(stack.config_file.read_text())["config"]["nsb-delays-components:brokerVersion"] == "3.10"
    result = stack.run(*command[1:], check=False)
    assert result.returncode != 0
    missing = missing_lines(block.source.splitlines(), result.output, lambda line: False)
    assert not missing, f"{block.where}: `{block.output_of}` does not print {missing}\n{result.explain()}"
    assert "Traceback" not in result.output and 'File "' not in result.output
