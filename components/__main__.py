"""Entry point of the component provider (``PulumiPlugin.yaml`` in this folder, or the plugin directory
``nsb-delays pulumi-plugin provider DIR`` writes for an installed package)."""

from importlib.metadata import version

from pulumi.provider.experimental import component_provider_host

from nsb_delays.components.provider import COMPONENTS, PACKAGE

if __name__ == "__main__":
    component_provider_host(COMPONENTS, PACKAGE, version=version(PACKAGE))
