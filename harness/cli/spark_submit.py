"""Entry point for ``spark-submit``: the Spark checker on a cluster (or any configured master).

    spark-submit --master spark://host:7077 harness/cli/spark_submit.py 'store/**/20*' --json

Arguments are those of ``tidemark check``, except ``--master``/``--engine``: the master and
resources come from ``spark-submit`` itself, and the session it configured is used as is.
The driver needs this package importable (the project's virtualenv as
``PYSPARK_DRIVER_PYTHON``, or the package shipped with ``--py-files``); executors only run
JVM code, since the checker uses no Python UDFs.  Run directories must be reachable from
the driver (results.json is written there) and from the executors (they read the Parquet).

With ``--json`` the standard output carries the JSON alone: ``spark-submit`` runs this script
with its standard error merged into its standard output (Spark's ``PythonRunner``), so the
summary table and verdict lines, which ``tidemark check --json`` prints to standard error, are
not printed at all here (every figure they show is in the JSON and in each ``results.json``),
and Python warnings are silenced.  A failure still prints its error there, with exit code 254
or 255, and no JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from checker.api import resolve_runs
from harness.cli.check import add_check_options, execute
from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_BAD_ARGUMENTS, EXIT_INTERNAL_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spark_submit.py", description="Tidemark checker under spark-submit"
    )
    parser.add_argument("paths", nargs="+", metavar="PATH_OR_GLOB")
    add_check_options(parser)
    args = parser.parse_args(argv)
    args.engine, args.master, args.remote = "spark", None, None
    from checker.spark.engine import SparkEngine
    from checker.spark.session import build_session

    try:
        run_dirs = resolve_runs(args.paths)
        session = build_session(None)
        engine = SparkEngine(session)
        try:
            if args.json:
                warnings.simplefilter("ignore")
                with open(os.devnull, "w", encoding="utf-8") as nowhere:
                    return execute(args, run_dirs, engine, human=nowhere)
            return execute(args, run_dirs, engine)
        finally:
            engine.close()
            session.stop()
    except UsageError as error:
        print(f"spark_submit.py: error: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    except Exception:
        import traceback

        traceback.print_exc()
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
