"""``make bench`` / ``python -m bench [NAME ...] [OPTIONS]``: run the benchmarks (all by default).

Options after the names go to the one benchmark named (``python -m bench migrate --rows 100000 --skip-cluster``;
``python -m bench migrate --help`` lists them)."""

from __future__ import annotations

import importlib
import inspect
import sys

BENCHMARKS = {
    "program": "bench.program",
    "broker": "bench.broker",
    "migrate": "bench.migrate",
    "delays": "bench.delays",
    "backlog": "bench.backlog",
    "pulumi": "bench.pulumi",
    "split": "bench.split",
    "preflight": "bench.preflight",
}


def main(arguments: list[str]) -> None:
    first_option = next((i for i, argument in enumerate(arguments) if argument.startswith("-")), len(arguments))
    names, options = arguments[:first_option], arguments[first_option:]
    for name in names:
        if name not in BENCHMARKS:
            raise SystemExit(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    if options and len(names) != 1:
        raise SystemExit(f"options {' '.join(options)!r} need exactly one benchmark named before them")
    for name in names or list(BENCHMARKS):
        print(f"\n=== {name} ===", flush=True)
        module = importlib.import_module(BENCHMARKS[name])
        if not options:
            module.main()
        elif inspect.signature(module.main).parameters:
            module.main(options)
        elif options in (["-h"], ["--help"]):
            print(inspect.cleandoc(module.__doc__ or ""))
        else:
            raise SystemExit(
                f"{name} takes no options ({' '.join(options)!r}); it is set by environment variables:"
                f" python -m bench {name} --help"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
