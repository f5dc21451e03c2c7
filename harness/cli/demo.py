"""``tidemark demo``: the short campaign the README's first command runs.

It runs the bundled ``demo`` campaign (``harness/run/campaigns/demo.toml``): the KIP-101
``kip101-loss`` scenario with ``truncation.mode=high-watermark`` (acknowledged writes
lost, as in Kafka before 0.11) and with ``leader-epoch`` (nothing lost), in Docker,
checked together by the Spark checker, with the summary table, each run's report and
the campaign index.  Exit code 0 when both runs came out as the scenario expects.
"""

from __future__ import annotations

import argparse
import importlib.resources
from pathlib import Path

from harness.cli.errors import UsageError
from harness.run.campaign import CampaignError, load_campaign
from harness.run.campaign_run import run_campaign


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", default="store", metavar="DIR", help="where the campaign's runs are stored"
    )
    parser.add_argument(
        "--engine",
        choices=("spark", "pandas"),
        default="spark",
        help="checker engine for the final check (pandas needs no JVM)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the demo campaign; a machine that cannot run it (no Docker engine answers) is one line."""
    source = Path(str(importlib.resources.files("harness.run") / "campaigns" / "demo.toml"))
    try:
        campaign = load_campaign(source)
        return run_campaign(campaign, Path(args.store), engine=args.engine)
    except CampaignError as error:
        raise UsageError(str(error)) from None
