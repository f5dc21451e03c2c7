"""Remotes: one interface to a cluster's nodes, whatever carries the commands.

Running a command, copying a file in or out, starting, signalling and watching a named daemon --
everything the harness and the nemesis do on a node goes through a ``Remote``, with bounded
calls and typed errors (a definite failure versus an unknown outcome).

Modules:

* ``remote`` -- the ``Remote`` protocol, its errors, optional abilities, and the shared daemon script;
* ``docker_remote`` -- ``DockerRemote``: the Docker engine's exec and archive API, no SSH needed;
* ``ssh_remote`` -- ``SshRemote``: paramiko, host keys always verified, for real hosts and containers.

May import: ``testbed.record`` (rank 0 rooms only); today it needs nothing outside itself.
Used by: ``testbed.cluster`` (which builds the remotes of a cluster), ``nemesis`` (faults act
through remotes), ``harness.run`` and ``harness.cli`` (``image``/``cluster`` find the Docker engine).
"""
