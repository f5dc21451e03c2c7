"""Time to a ready cluster (image cached) and the wall time of a whole 30 s run.

    .venv/bin/python bench/cluster.py [--repeats 3] [--time-limit 30]

Prints, per repeat: seconds from ``DockerCluster`` start to every broker answering Kafka
requests (containers, sshd, controller and brokers started, brokers registered), the
teardown time, and the end-to-end wall time of ``run_test`` with a kill+partition nemesis
(set-up, main phase, heal, recovery wait, drain, dumps, teardown, pandas check).
Targets (issue 4): <= 10 s to ready, <= 60 s end to end for a 30 s workload.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The repository first: bench/checker.py would otherwise shadow the checker package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.run.runner import run_test
from harness.run.spec import TestSpec
from nemesis.spec import NemesisSpec
from testbed.cluster.bundled import BundledCluster
from testbed.cluster.docker_cluster import CONTROLLER, DockerCluster
from testbed.cluster.image import ensure_image
from testbed.nodes.docker_remote import connect_docker


def time_to_ready(client: object, image: str) -> tuple[float, float]:
    started = time.monotonic()
    cluster = DockerCluster(client, image, brokers=3).start()  # type: ignore[arg-type]
    try:
        bundled = BundledCluster(
            cluster.remotes(),
            {n: cluster.ip(n) for n in cluster.node_names},
            cluster.broker_names,
            CONTROLLER,
            {},
        )
        bundled.configure()
        bundled.start()
        ready = time.monotonic() - started
    finally:
        torn = time.monotonic()
        cluster.teardown()
    return ready, time.monotonic() - torn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=30.0)
    args = parser.parse_args()
    client = connect_docker()
    image = ensure_image(client)
    readies, runs = [], []
    for repeat in range(args.repeats):
        ready, teardown = time_to_ready(client, image)
        readies.append(ready)
        print(f"repeat {repeat}: ready in {ready:.1f} s (teardown {teardown:.1f} s)", flush=True)
    for repeat in range(args.repeats):
        spec = TestSpec(
            name="bench",
            time_limit=args.time_limit,
            seed=repeat,
            nemesis=NemesisSpec(faults=("kill", "partition"), interval_seconds=8, seed=repeat),
        )
        with tempfile.TemporaryDirectory() as store, open("/dev/null", "w") as quiet:
            started = time.monotonic()
            outcome = run_test(spec, Path(store), out=quiet)
            wall = time.monotonic() - started
        runs.append(wall)
        print(
            f"repeat {repeat}: {args.time_limit:.0f} s run end to end in {wall:.1f} s, verdict {outcome.verdict}",
            flush=True,
        )
    print(
        f"time to ready cluster: median {statistics.median(readies):.1f} s, max {max(readies):.1f} s (target <= 10 s)"
    )
    print(
        f"end-to-end {args.time_limit:.0f} s run: median {statistics.median(runs):.1f} s, max {max(runs):.1f} s "
        f"(target <= 60 s)"
    )


if __name__ == "__main__":
    main()
