"""``make bench`` / ``python -m bench [NAME ...]``: run the benchmarks (all by default)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "program": "bench.program",
    "broker": "bench.broker",
    "migrate": "bench.migrate",
    "delays": "bench.delays",
    "backlog": "bench.backlog",
}


def main(names: list[str]) -> None:
    for name in names or list(BENCHMARKS):
        if name not in BENCHMARKS:
            raise SystemExit(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
        print(f"\n=== {name} ===", flush=True)
        importlib.import_module(BENCHMARKS[name]).main()


if __name__ == "__main__":
    main(sys.argv[1:])
