"""tansu on cluster nodes: N stateless brokers sharing one PostgreSQL node (``--target tansu``).

tansu (https://tansu.io, pinned in :mod:`testbed.cluster.tansu_image`) speaks the Kafka protocol
and keeps nothing on its own disk; what that means for faults and evidence is
:mod:`testbed.cluster.shared_store`'s, shared with its successor nisshi.  What is tansu's own:
its binary, its broker id (tansu-broker's ``NODE_ID``, 111) and that Tidemark must create its
PostgreSQL tables (:data:`testbed.cluster.postgres.SCHEMA_FILE`) before a broker connects.
"""

from __future__ import annotations

from testbed.cluster.shared_store import (
    POSTGRES_NODE,
    REPLICA_EVIDENCE,
    BrokerProgram,
    RequestProxiedStore,
    SharedStoreCluster,
    supervised,
)
from testbed.cluster.tansu_image import TANSU_IMAGE_PATH

__all__ = [
    "POSTGRES_NODE",
    "REPLICA_EVIDENCE",
    "TANSU",
    "TANSU_NODE_ID",
    "ProxiedTansuCluster",
    "TansuCluster",
    "supervised",
]

TANSU_NODE_ID = 111
"""The broker id every tansu broker reports (tansu-broker's ``NODE_ID``): brokers are interchangeable."""
TANSU = BrokerProgram("tansu", TANSU_IMAGE_PATH, TANSU_NODE_ID, applies_schema=True)
"""How a tansu broker starts: tansu does not create its tables, Tidemark applies them first."""


class TansuCluster(SharedStoreCluster):
    """tansu brokers on ``brokers`` sharing the PostgreSQL on ``postgres_node``."""

    program = TANSU


class ProxiedTansuCluster(RequestProxiedStore, TansuCluster):
    """tansu brokers each behind a request proxy (:class:`RequestProxiedStore`): the request-path
    faults (``request-hold``, ``-delay``, ``-duplicate``, ``-reset``) act on their clients' requests."""
