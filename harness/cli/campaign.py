"""``tidemark campaign FILE``: run a test matrix, resumably, and check it in one Spark job.

A run *passes* when it is valid -- or, for a scenario run, when its verdict is the one
the scenario expects under that run's settings (a high-watermark run of ``kip101-loss``
must lose writes).  Exit code: 0 every run passed, 1 any failed, 2 any unknown (not
checked, or incomplete evidence), 254 bad arguments or a bad campaign file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.errors import UsageError
from harness.run.campaign import CampaignError, load_campaign
from harness.run.campaign_run import run_campaign


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="campaign TOML file")
    parser.add_argument("--store", default="store", metavar="DIR")
    parser.add_argument(
        "--engine",
        choices=("spark", "pandas"),
        default=None,
        help="checker engine (default: the file's, else spark)",
    )
    parser.add_argument("--master", metavar="URL", help="Spark master for the final check (default local[*])")


def run(args: argparse.Namespace) -> int:
    try:
        campaign = load_campaign(Path(args.file))
        return run_campaign(
            campaign, Path(args.store), engine=args.engine or campaign.engine, master=args.master
        )
    except CampaignError as error:
        raise UsageError(str(error)) from None
