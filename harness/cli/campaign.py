"""``tidemark campaign FILE``: run a test matrix, resumably, and check it in one Spark job.

``--dry-run`` validates the file as a run would (every run's and hunt's spec checked by its
target) and prints the plan -- runs, hunts, budgets -- without starting or writing anything: the
nightly workflow's first step, and the test of every workflow command
(``tests/docs/test_workflows.py``).

A run *passes* when it is valid -- or, for a scenario run, when its verdict is the one
the scenario expects under that run's settings (a high-watermark run of ``kip101-loss``
must lose writes).  Exit code: 0 every run passed (or, with ``--dry-run``, the file is valid), 1 any failed, 2 any unknown (not
checked, or incomplete evidence), 254 bad arguments or a bad campaign file.

With the Spark engine and ``[[hunt]]`` tables, the check and the hunts' runs go through one Spark
Connect server, started after the matrix runs (``--no-spark-server``: none, each check starts its
own JVM; ``--remote``: that server instead; without hunts the one check needs no server):
:mod:`harness.run.check_server`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.engine_options import add_remote_option, add_server_option, engine_of, remote_of
from harness.cli.errors import UsageError
from harness.run.campaign import CampaignError, campaign_directory, load_campaign, plan_lines
from harness.run.campaign_run import run_campaign
from harness.run.exit_codes import EXIT_VALID


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="campaign TOML file")
    parser.add_argument("--store", default="store", metavar="DIR")
    parser.add_argument(
        "--engine",
        choices=("spark", "pandas"),
        default=None,
        help="checker engine (default: the file's, else spark)",
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        help="Spark master of the checks (default local[*]; with the campaign's server, the server's)",
    )
    add_remote_option(parser)
    add_server_option(parser)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate FILE and print its plan (runs, hunts, budgets); start nothing, write nothing",
    )


def run(args: argparse.Namespace) -> int:
    remote = remote_of(args)  # a bad address is refused before the file is read
    try:
        campaign = load_campaign(Path(args.file))
        if args.dry_run:
            for line in plan_lines(campaign, campaign_directory(Path(args.store), campaign)):
                print(line)
            print("nothing started (--dry-run); Docker and a target's binary are checked when it runs")
            return EXIT_VALID
        return run_campaign(
            campaign,
            Path(args.store),
            engine=engine_of(args, remote, campaign.engine),
            master=args.master,
            remote=remote,
            spark_server=not args.no_spark_server,
        )
    except CampaignError as error:
        raise UsageError(str(error)) from None
