"""``tidemark cluster``: start a cluster to poke at by hand, list clusters, remove them.

* ``tidemark cluster up [--brokers N] [--image TAG]`` starts a cluster and leaves it running; it prints
  the run id, each node's container and IP, and the SSH key and known_hosts to reach them.
* ``tidemark cluster ls`` lists every Tidemark container, by run.
* ``tidemark cluster down --run RUN_ID`` removes one run; ``--all`` removes every container and network
  labelled by Tidemark, whichever process started them (e.g. after ``kill -9`` of a harness).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import TYPE_CHECKING

from harness.cli.errors import UsageError
from harness.run.exit_codes import EXIT_INTERNAL_ERROR

if TYPE_CHECKING:
    import docker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="cluster_action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser(
        "up", help="start a cluster and leave it running", description="Start a cluster and leave it running."
    )
    up.add_argument(
        "--brokers", type=int, default=3, metavar="N", help="number of broker containers (default 3)"
    )
    up.add_argument(
        "--image",
        metavar="TAG",
        help="image to run (default: build or reuse it as `tidemark image build` does)",
    )
    up.add_argument("--run-id", metavar="ID", help="run id (default: UTC time plus a random suffix)")
    actions.add_parser(
        "ls", help="list Tidemark containers by run", description="List Tidemark containers by run."
    )
    down = actions.add_parser(
        "down", help="remove clusters", description="Remove clusters (containers and networks)."
    )
    which = down.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="remove everything labelled tidemark=1")
    which.add_argument("--run", metavar="RUN_ID", help="remove one run's containers and network")


def run(args: argparse.Namespace) -> int:
    from testbed.nodes.docker_remote import DockerUnavailable, connect_docker

    try:
        client = connect_docker()
    except DockerUnavailable as error:
        raise UsageError(str(error)) from error
    if args.cluster_action == "up":
        return _up(client, args)
    if args.cluster_action == "ls":
        return _list(client)
    return _down(client, args)


def _up(client: docker.DockerClient, args: argparse.Namespace) -> int:
    from testbed.cluster.docker_cluster import ClusterError, DockerCluster, new_run_id
    from testbed.cluster.image import ensure_image
    from testbed.cluster.image_build import ImageBuildError, cache_directory

    if args.brokers < 1:
        raise UsageError(f"--brokers {args.brokers}: need at least 1")
    run_id = args.run_id or new_run_id()
    try:
        cluster = DockerCluster(
            client,
            "unset",
            brokers=args.brokers,
            run_id=run_id,
            work_dir=cache_directory() / "clusters" / run_id,
            owned=False,  # meant to outlive this process: never taken for a dead run's leftovers
        )
    except ValueError as error:
        raise UsageError(f"--run-id: {error}") from error
    try:
        cluster.image = args.image or ensure_image(client, progress=lambda line: print(line, file=sys.stderr))
        cluster.start()
    except (ImageBuildError, ClusterError) as error:
        print(f"tidemark cluster up: error: {error}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    cluster.detach()
    print(f"run {cluster.run_id} (image {cluster.image}, network {cluster.network_name})")
    for name in cluster.node_names:
        node = cluster.nodes[name]
        print(f"  {name:<10} {node.ip:<15} container {cluster.network_name}-{name}")
    print(f"ssh: ssh -i {cluster.ssh_key_path} -o UserKnownHostsFile={cluster.known_hosts_path} root@<ip>")
    print(f"remove: tidemark cluster down --run {cluster.run_id}")
    return 0


def _list(client: docker.DockerClient) -> int:
    from testbed.cluster.docker_labels import list_runs

    runs = list_runs(client)
    if not runs:
        print("no Tidemark containers")
    for run_id, nodes in runs.items():
        print(f"{run_id}: " + ", ".join(f"{node} ({status})" for node, status in nodes))
    return 0


def _down(client: docker.DockerClient, args: argparse.Namespace) -> int:
    from testbed.cluster.docker_labels import ClusterError, remove_all, remove_run
    from testbed.cluster.image_build import cache_directory

    try:
        containers, networks = remove_all(client) if args.all else remove_run(client, args.run)
    except ClusterError as error:
        print(f"tidemark cluster down: error: {error}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    clusters_dir = cache_directory() / "clusters"
    for work_dir in clusters_dir.glob("*") if args.all else [clusters_dir / args.run]:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(f"removed {containers} containers and {networks} networks")
    return 0
