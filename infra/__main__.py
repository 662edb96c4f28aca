"""Entry point for ``pulumi up`` (``main: infra/`` in Pulumi.yaml)."""

from infra.program import main

main()
