"""Entry point for ``pulumi up`` (``main: infra/`` in Pulumi.yaml)."""

from nsb_delays.infra.heap import defer_full_collections
from nsb_delays.infra.program import main

defer_full_collections()
main()
