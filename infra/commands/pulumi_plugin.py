"""``nsb-delays pulumi-plugin provider|policy-pack DIR``: a Pulumi plugin directory for an installed package.

In the repository, ``components/`` and ``policies/`` are the plugin directories themselves (both run in the
checkout's ``../.venv``). Inside site-packages neither works: Pulumi resolves a relative
``virtualenv`` against the plugin directory and would create it inside site-packages. So an installed
package writes a small directory of its own, the shape Pulumi expects of a source-based plugin:

- ``PulumiPlugin.yaml`` / ``PulumiPolicy.yaml``: the packaged manifest with ``virtualenv: venv``;
- ``requirements.txt``: this package (``nsb-delays==<installed version>``, or ``--requirement`` such as a
  wheel's path);
- ``__main__.py``: runs ``nsb_delays.components`` (the provider host) or ``nsb_delays.policies`` (the pack).

What Pulumi then does with it (pulumi/pulumi, read for this): ``pulumi package add DIR`` installs a provider
as a plugin (``packageworkspace.Workspace.InstallPluginAt``, ``sdk/python/cmd/pulumi-language-python/main.go``
``InstallDependencies`` with ``IsPlugin``); a local pack's virtualenv is made by ``pulumi install`` run in DIR
(``pkg/cmd/pulumi/install/install.go``: ``policy.InstallPluginDependencies``), never by ``pulumi preview
--policy-pack``. Either way the pip toolchain (``sdk/python/toolchain/pip.go`` ``InstallDependencies``) creates
``DIR/venv`` with ``python -m venv`` and runs ``pip install -r requirements.txt`` in DIR; ``RunPlugin`` then
starts ``DIR/venv/bin/python DIR`` (a provider) or ``python -u -m pulumi.policy … DIR`` (a pack, which
``runpy.run_path``s DIR), i.e. our ``__main__.py``. ``parseOptions`` defaults a plugin's ``virtualenv`` to
``venv`` anyway: Pulumi does not run plugins in the ambient Python. The engine ``make setup`` builds starts a
pack directory the same way (``tools/engine/pythonhost``).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from importlib.metadata import version
from pathlib import Path

import click
import yaml

from .errors import CommandError

DISTRIBUTION = "nsb-delays"
PLUGIN_VIRTUALENV = "venv"


@dataclass(frozen=True)
class PluginKind:
    package: str  # the sub-package whose __main__ the plugin runs and whose manifest it ships
    manifest: str
    use: str  # what to run next, for the message after writing
    # a script that starts the plugin without a language host: the provider's, for a `packages:` entry in
    # Pulumi.yaml (components/executable/...), which the engine `make setup` builds needs (docs/reference/
    # compatibility.md); a pack directory starts through the language host with any engine
    executable: str | None = None


KINDS = {
    "provider": PluginKind(
        "nsb_delays.components",
        "PulumiPlugin.yaml",
        "pulumi package add {directory}  (in your Pulumi project)\n"
        "  (where the language host cannot start a plugin directory: `packages: {{nsb-delays: {directory}/executable}}`"
        " in Pulumi.yaml)",
        "executable/pulumi-resource-nsb-delays",
    ),
    "policy-pack": PluginKind(
        "nsb_delays.policies",
        "PulumiPolicy.yaml",
        "(cd {directory} && pulumi install)  (makes its venv from requirements.txt)\n"
        "  pulumi preview --policy-pack {directory}",
    ),
}


class CannotWrite(CommandError):
    """The directory cannot be written (permissions, a file in the way): bad input, exit 2."""


MAIN = '''"""Runs {package} from the installed {distribution} package (written by `nsb-delays pulumi-plugin`)."""

import runpy

runpy.run_module("{package}", run_name="__main__", alter_sys=True)
'''


def local_source(directory: Path) -> str:
    """``directory`` as ``pulumi package add`` takes it for a folder: absolute, or starting ``./`` / ``..``.

    A bare name (``nsb-delays-provider``) is a plugin to download for the Pulumi CLI: pulumi/pulumi
    ``sdk/go/common/resource/plugin/host.go`` ``IsLocalPluginPath`` takes a source as local only when it
    starts with ``./``, ``..`` or ``/``, or does not parse as a plugin spec whose name matches
    ``workspace.PluginNameRegexp`` (and ``pkg/cmd/pulumi/packages`` ``Resolve`` asks it first).
    ``Path("./x")`` prints as ``x``, hence the explicit ``./``.
    """
    text = directory.as_posix()
    if directory.is_absolute() or text == ".." or text.startswith("../"):
        return text
    return "./" if text == "." else f"./{text}"


def plugin_files(kind: PluginKind, requirement: str) -> dict[str, str]:
    """File name -> text of the plugin directory: our packaged manifest with its own ``venv``."""
    manifest = yaml.safe_load(resources.files(kind.package).joinpath(kind.manifest).read_text())
    manifest["runtime"].setdefault("options", {})["virtualenv"] = PLUGIN_VIRTUALENV
    if "version" in manifest:  # a policy pack's version: the installed package's
        manifest["version"] = version(DISTRIBUTION)
    files = {
        kind.manifest: yaml.safe_dump(manifest, sort_keys=False, width=1000),
        "requirements.txt": f"{requirement}\n",
        "__main__.py": MAIN.format(package=kind.package, distribution=DISTRIBUTION),
    }
    if kind.executable:
        files[kind.executable] = resources.files(kind.package).joinpath(kind.executable).read_text()
    return files


@click.command(name="pulumi-plugin")
@click.argument("kind", type=click.Choice(list(KINDS)))
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--requirement",
    metavar="SPEC",
    help=f"What the plugin's virtualenv installs (default: {DISTRIBUTION}==<this version>; e.g. a wheel's path).",
)
def pulumi_plugin(kind: str, directory: Path, requirement: str | None) -> None:
    """Write a Pulumi plugin directory (the component PROVIDER for other languages, or the POLICY-PACK)
    that runs this installed package in a virtualenv of its own."""
    requirement = f"{DISTRIBUTION}=={version(DISTRIBUTION)}" if requirement is None else requirement.strip()
    if not requirement or "\n" in requirement:
        raise click.BadParameter(
            "give one requirement (a name with version, or a wheel's path)", param_hint="--requirement"
        )
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise click.BadParameter(
            f"{directory} exists and is not an empty directory; give a new one (nothing was written)",
            param_hint="DIRECTORY",
        )
    files = plugin_files(KINDS[kind], requirement)
    write_plugin(directory, files, KINDS[kind].executable)
    click.echo(f"wrote {', '.join(files)} to {directory} (requirement: {requirement})")
    click.echo(f"next: {KINDS[kind].use.format(directory=local_source(directory))}")


def write_plugin(directory: Path, files: dict[str, str], executable: str | None) -> None:
    """The plugin directory's files, ``executable`` (one of them) made executable; ``CannotWrite`` if refused."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).parent.mkdir(exist_ok=True)
            (directory / name).write_text(text)
        if executable:
            (directory / executable).chmod(0o755)
    except OSError as error:
        raise CannotWrite(f"cannot write the plugin directory {directory}: {error.strerror}") from None
