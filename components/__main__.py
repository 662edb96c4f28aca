"""Entry point of the component provider (``PulumiPlugin.yaml`` in this folder, ``executable/``, or the plugin
directory ``nsb-delays pulumi-plugin provider DIR`` writes for an installed package)."""

import sys

from nsb_delays.components.provider import serve

if __name__ == "__main__":
    serve(sys.argv[1:])
