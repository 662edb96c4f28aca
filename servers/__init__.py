"""The tests' and the benchmarks' own servers, never installed: RabbitMQ as the tests drive it (restarts, crashes,
``rabbitmqctl``) and Debian 13's 4.0 and Debian forky's 4.3 in chroots, moto with resets, the three-node RabbitMQ
cluster, PostgreSQL, MariaDB and a standalone Spark cluster with Spark Connect; ``debian_mirror.py`` names the
Debian mirror the chroots are built from.

They build on the demo's own servers (``nsb_delays.infra.commands.demo.servers``: a private broker, moto, free ports,
processes stopped by PID), the one part of them the installed package needs. Nothing here imports ``tests``
(import-linter, ``make lint``), and nothing installed imports this.
"""

from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
