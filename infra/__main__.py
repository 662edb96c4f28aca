"""Entry point for ``pulumi up`` (``main: infra/`` in Pulumi.yaml)."""

from nsb_delays.infra.program import main

main()
