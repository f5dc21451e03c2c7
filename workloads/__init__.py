"""Workloads: real Kafka clients producing and consuming against the cluster, recording every op.

A workload turns client calls into ops with honest outcomes: ``fail`` only when a send certainly
never reached a broker, ``info`` when it may have taken effect.  It needs nothing of the
cluster but its bootstrap address, so it runs against any Kafka-compatible cluster.

Modules:

* ``clients`` -- kafka-python and confluent-kafka behind one producer and one consumer interface;
* ``queue`` -- the ``queue`` workload (:class:`QueueSpec`, :class:`QueueWorkload`): unique sends,
  consumer polls, the final drain;
* ``txn`` -- the queue workload's transactional mode (``--txn``): producers run Kafka transactions
  of sends and polls, every client read and write a ``txn`` op;
* ``txn_clients`` -- both libraries' transactional producers behind one interface, their errors as
  "abort it" or "the producer is done";
* ``txn_input`` -- what a transactional producer thread's polls read: every partition, or
  (``--txn-ctp``, consume-transform-produce) its partitions as a consumer group from the group's
  committed offsets, rewound after every transaction that did not commit;
* ``txn_subscribed`` -- consume-transform-produce by subscribe: the producers as the group's
  members, partitions moving at rebalances, offsets sent with the member's generation (KIP-447);
* ``txn_drain`` -- the ``--txn`` drain's wait until no transaction is open;
* ``group_events`` -- group consumers (``--consume-via subscribe``) behind one interface: what a
  poll returned (records, rebalances, commit answers) in order, and the commit-outcome rule;
* ``group_kafka_python``, ``group_confluent`` -- that interface on each client library;
* ``group_member`` -- one group member's ops (``assign``, ``poll``, ``commit``, ``revoke``);
* ``group_fleet`` -- the group's members as threads, consumer churn, and the choice of library;
* ``queue_assign`` -- the queue workload's ``assign`` consumers; ``queue_drain`` -- its final drain;
* ``client_host``, ``client_child`` -- clients in child processes (``--client-processes``), the
  parent's side and the child's, and the crash of one (the nemesis's ``client-crash`` and
  ``consumer-crash``); ``hosted_consumers`` -- the consumers' side of the parent.

May import: rooms of a lower rank (``testbed.record`` is all it needs), never ``checker`` or
``nemesis``.  Used by: ``harness.run`` (spec and runner) and ``harness.cli`` (``run``).
"""
