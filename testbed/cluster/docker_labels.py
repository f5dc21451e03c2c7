"""What marks a Tidemark container or network as ours, and removing them by those marks.

Every container and network of a cluster carries ``tidemark=1``, ``tidemark.run=<run>`` and, when
its process owns it, ``tidemark.owner=<host>:<pid>`` (:mod:`testbed.cluster.docker_cluster` says
why). Removal goes by label, never by remembered ids, so a container created just as an interrupt
arrived is removed too, and a harness killed by SIGKILL is cleaned up by the next run
(:func:`remove_orphans`). Apart from the cluster so ``tidemark cluster down`` and a hunt's
between-run sweep need no cluster object.
"""

from __future__ import annotations

import contextlib
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import docker.errors

LABEL = "tidemark"
LABEL_RUN = "tidemark.run"
LABEL_NODE = "tidemark.node"
LABEL_ROLE = "tidemark.role"
LABEL_OWNER = "tidemark.owner"


class ClusterError(Exception):
    """The cluster could not be started or removed; the message says which node and why."""


def _remove_labelled(client: docker.DockerClient, label: str) -> tuple[int, int]:
    """Remove every container, then every network, carrying ``label``; return how many of each."""
    containers = client.containers.list(all=True, filters={"label": label}, sparse=True)

    def remove_container(container: Any) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="tidemark-remove") as pool:
        list(pool.map(remove_container, containers))
    networks = client.networks.list(filters={"label": label})
    for network in networks:
        with contextlib.suppress(docker.errors.NotFound):
            network.remove()
    left = client.containers.list(all=True, filters={"label": label}, sparse=True)
    left_networks = client.networks.list(filters={"label": label})
    if left or left_networks:
        raise ClusterError(
            f"still present after removal ({label}): containers {[c.id[:12] for c in left]}, "
            f"networks {[n.name for n in left_networks]}"
        )
    return len(containers), len(networks)


def remove_run(client: docker.DockerClient, run_id: str) -> tuple[int, int]:
    """Remove the containers and network of one run; (containers, networks) removed."""
    return _remove_labelled(client, f"{LABEL_RUN}={run_id}")


def owner_label() -> str:
    """The ``tidemark.owner`` value of clusters this process creates: ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_is_gone(owner: str) -> bool:
    """Whether the process named by an owner label was on this host and no longer exists."""
    host, _, pid_text = owner.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False  # another machine's process, or a label we did not write: not ours to judge
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def remove_orphans(client: docker.DockerClient) -> list[str]:
    """Remove every run whose owner process on this host is gone; return their run ids.

    Runs without an owner label (``tidemark cluster up``'s, meant to outlive their process) and
    runs owned on other hosts are left alone.
    """
    orphans: set[str] = set()
    for listing in (
        client.containers.list(all=True, filters={"label": [f"{LABEL}=1", LABEL_OWNER]}, sparse=True),
        client.networks.list(filters={"label": [f"{LABEL}=1", LABEL_OWNER]}),
    ):
        for item in listing:
            labels = item.attrs.get("Labels") or {}
            if LABEL_RUN in labels and _owner_is_gone(labels.get(LABEL_OWNER, "")):
                orphans.add(labels[LABEL_RUN])
    for run_id in sorted(orphans):
        remove_run(client, run_id)
    return sorted(orphans)


def remove_all(client: docker.DockerClient) -> tuple[int, int]:
    """Remove every container and network labelled ``tidemark=1`` (any run, any process)."""
    return _remove_labelled(client, f"{LABEL}=1")


def list_runs(client: docker.DockerClient) -> dict[str, list[tuple[str, str]]]:
    """Run id → [(node, container status)] for every Tidemark container present."""
    runs: dict[str, list[tuple[str, str]]] = {}
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        labels = container.labels
        if LABEL_RUN in labels:
            runs.setdefault(labels[LABEL_RUN], []).append((labels.get(LABEL_NODE, "?"), container.status))
    return {run: sorted(nodes) for run, nodes in sorted(runs.items())}
