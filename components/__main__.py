"""Entry point of the component provider (``PulumiPlugin.yaml`` in this folder)."""

from pulumi.provider.experimental import component_provider_host

from nsb_delays.components.provider import COMPONENTS, PACKAGE

if __name__ == "__main__":
    component_provider_host(COMPONENTS, PACKAGE, version="0.1.0")
