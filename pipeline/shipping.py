"""What a cluster's executors need from us: this package as a ``--py-files`` zip, and the list of
third-party packages their Python must have.

Executors are other processes, usually on other machines: they import nothing from the driver's
environment. ``mapInArrow`` pickles the dispatch function by reference (module and name), so every
executor must import ``nsb_delays.pipeline.dispatch`` and what it imports. Spark puts the files of
``--py-files`` (``spark.submit.pyFiles``) on the executors' ``PYTHONPATH`` (Spark's
``PythonWorkerFactory``/``PythonUtils.mergePythonPaths``), and ``SparkSession.addArtifacts(…,
pyfile=True)`` does the same through Spark Connect.

``nsb_delays`` is a PEP 420 namespace package (no ``__init__.py``): Python's ``zipimport`` finds a
namespace package inside a zip only through the zip's *directory entries* (``zipimporter.find_spec``
looks for ``nsb_delays/`` as an entry), so the zip is written with an entry for every folder — a
wheel renamed to ``.zip`` has none and fails on the executors with ``No module named 'nsb_delays'``.
The files are taken from wherever the package is imported from, so an editable install zips the
same tree as a wheel install.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import zipfile
from pathlib import Path

NAMESPACE = "nsb_delays"
SUBPACKAGES = ("components", "infra", "policies", "pipeline", "brokers", "stack")
EXECUTOR_REQUIREMENTS = Path(__file__).with_name("executor-requirements.txt")
DISTRIBUTION = "nsb-delays"
SPARK_EXTRA = "spark"
# Not needed to migrate, and pulumi-policy pins protobuf ~=5.29 while pyspark 4's Connect client is
# generated for a newer protobuf runtime (see connect_client_requirements).
INFRASTRUCTURE_ONLY = re.compile(r"^pulumi")
SKIPPED_PARTS = ("__pycache__",)
ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)  # fixed: the same tree gives the same zip (Spark caches by name only)


def package_files() -> list[tuple[str, Path]]:
    """``(name in the zip, file)`` for every file of the installed package (``.pyc`` caches left out)."""
    files = []
    for name in SUBPACKAGES:
        module = importlib.import_module(f"{NAMESPACE}.{name}")
        root = Path(module.__file__ or "").parent
        for path in sorted(root.rglob("*")):
            parts = path.relative_to(root).parts
            if path.is_file() and not set(parts) & set(SKIPPED_PARTS) and path.suffix != ".pyc":
                files.append((f"{NAMESPACE}/{name}/{'/'.join(parts)}", path))
    return files


def write_package_zip(target: Path) -> Path:
    """Write the package as a zip for ``--py-files`` / ``addArtifacts(pyfile=True)``, with directory entries."""
    files = package_files()
    folders = sorted({name.rsplit("/", depth)[0] + "/" for name, _ in files for depth in range(1, name.count("/") + 1)})
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder in folders:
            archive.writestr(zipfile.ZipInfo(folder, ZIP_TIMESTAMP), b"")
        for name, path in files:
            info = zipfile.ZipInfo(name, ZIP_TIMESTAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    partial.replace(target)
    return target


def executor_requirements() -> list[str]:
    """The requirement lines executors need (comments and blank lines dropped)."""
    lines = (line.split("#", 1)[0].strip() for line in EXECUTOR_REQUIREMENTS.read_text().splitlines())
    return [line for line in lines if line]


def connect_client_requirements() -> list[str]:
    """What a Spark Connect client's Python needs to run the migration (install this package into it
    with ``--no-deps``): the base requirements but Pulumi's, the ``spark`` extra, and ``pyspark[connect]``
    of the Spark version installed here (the client should match the server's Spark).

    A separate environment, because the two cannot be resolved together: pyspark 4.3's generated Connect
    protos (``pyspark/sql/connect/proto/base_pb2.py``) call ``ValidateProtobufRuntimeVersion`` for
    gencode 6.33.5, which refuses an older runtime, and pulumi-policy 1.21 requires ``protobuf~=5.29.5``.
    """
    import pyspark

    requirements = []
    for line in importlib.metadata.requires(DISTRIBUTION) or []:
        requirement, _, marker = (part.strip() for part in line.partition(";"))
        base = not marker and not INFRASTRUCTURE_ONLY.match(requirement)
        spark = re.fullmatch(rf"extra\s*==\s*[\"']{SPARK_EXTRA}[\"']", marker) and not requirement.startswith("pyspark")
        if base or spark:
            requirements.append(requirement)
    return [*requirements, f"pyspark[connect]=={pyspark.__version__}"]
