"""Clusters under test: setting one up, and asking it who leads and who is in sync.

A cluster is either the bundled broker started on nodes (Docker containers made here, or hosts
reached over SSH) or an external Kafka-compatible cluster the harness did not start.  Either way
the rest of the harness sees the small interface of ``protocol`` and its optional abilities.

Modules:

* ``protocol`` -- :class:`Cluster` and its abilities (node control, replica dumps, log files, power loss);
* ``bundled`` -- the bundled broker (``broker_impl``) configured, started and stopped on nodes via remotes;
* ``lazyfs_mount`` -- the power-loss filesystem (``nemesis.lazyfs``) over a node's data directory,
  for every target that offers power loss;
* ``docker_cluster`` -- a private Docker network with a controller and N broker containers;
* ``external`` -- a cluster given by ``--bootstrap`` and an optional SSH inventory of its nodes;
* ``image`` -- build or reuse the node image (tag = hash of its inputs), no registry needed;
* ``debian_base`` -- the node image's registry-free base: a Debian root filesystem from mmdebstrap;
* ``wheelhouse`` -- the node image's Python packages: pinned on the host, downloaded as wheels;
* ``image_build`` -- what every image build shares: its error, progress, image lookups, the build;
* ``tansu`` -- the second target: stateless tansu brokers sharing one PostgreSQL node;
* ``postgres`` / ``postgres_node`` -- PostgreSQL's command lines, settings and log dump, and the
  PostgreSQL node driven through its Remote (``tansu_schema.sql``: the tables tansu expects);
* ``tansu_image`` -- the pinned tansu binary (built once with cargo, cached) and the tansu image;
* ``targets`` -- the names of the systems a run can start (``--target``) and the default;
* ``kafka_admin`` -- topic creation and leader/ISR questions over the real Kafka protocol.

May import: ``testbed.nodes``, ``testbed.record``, ``broker_impl`` (for its settings) and
``nemesis.lazyfs`` -- lower ranks only.  Used by: ``nemesis`` (kafka_admin, protocol),
``harness.run`` (the runner sets clusters up and tears them down) and ``harness.cli``.
"""
