"""The migration job's file for ``spark-submit`` (and ``python -m nsb_delays.pipeline``).

spark-submit takes a Python *file*; from an installed package this is it:

    spark-submit --master spark://host:7077 --jars /usr/share/java/postgresql.jar \\
        "$(python -m nsb_delays.pipeline --job-file)" run --source-jdbc jdbc:postgresql://db/app --endpoint Sales ...

Run as a file, this directory is first on ``sys.path``; every import here and in the package is
``nsb_delays.``-qualified or relative, so none of the package's module names can shadow anything.
"""

import sys

from nsb_delays.pipeline.job import migrate

if __name__ == "__main__":
    if sys.argv[1:] == ["--job-file"]:
        print(__file__)
    else:
        migrate(prog_name="migrate")
