"""The bundled broker: a small Kafka-compatible replicated log, the system under test.

A controller and brokers speaking the real Kafka wire protocol, with Kafka's replication rules
(leader epochs, HW, ISR, KIP-101 truncation or the older high-watermark truncation) and Kafka's
durability (page cache, flush policy), so the harness has a target whose behaviour it knows.

Modules:

* ``broker`` -- a broker process: listener, partition replicas, controller link, background duties;
* ``controller`` -- cluster metadata, broker liveness, leader election, leader epochs;
* ``config`` -- the ``.properties`` files of the controller and brokers, every key declared;
* ``broker_view`` -- what the handlers and the group coordinator use of their broker (protocols);
* ``handlers`` -- one Kafka API handler per request type;
* ``group_handlers`` -- the group coordinator's Kafka APIs (FindCoordinator, JoinGroup, ...);
* ``group_coordinator`` -- the groups of the ``__consumer_offsets`` partitions this broker leads:
  loading them from the log, commits appended with acks=all, the groups' clocks;
* ``coordinator_partition`` -- one led ``__consumer_offsets`` partition's groups and offsets, by replay;
* ``group_state`` -- one consumer group's membership state machine (pure);
* ``group_members`` -- a group's members, the answers to JoinGroup and SyncGroup, the protocol vote;
* ``group_records`` -- group placement (Java's hash) and the ``__consumer_offsets`` record format;
* ``txn_coordinator`` -- the transactional ids of the ``__transaction_state`` partitions this
  broker leads: loading, plans carried out as acks=all records, markers, timeouts;
* ``txn_state`` -- one transactional id's state machine and every rule that changes it (pure);
* ``txn_records`` -- transaction placement and the ``__transaction_state`` record format;
* ``txn_handlers`` -- the transactional Kafka APIs (InitProducerId, AddPartitionsToTxn, EndTxn, ...);
* ``txn_markers`` -- WriteTxnMarkers: the coordinator's sender, the partition leader's writer;
* ``txn_offsets`` -- TxnOffsetCommit: a transaction's offsets through the group coordinator;
* ``txn_rules`` -- the transaction bug switches, read once from the settings (KIP-890 part 1 and part 2);
* ``txn_verification`` -- a partition leader verifies a transactional produce with its coordinator;
* ``txn_index`` -- a log's open and aborted transactions, hence the last stable offset;
* ``control_records`` -- transaction markers (control batches) and transactional batches as bytes;
* ``leader_append`` -- a broker's own acks=all appends (coordinator records, markers);
* ``partition`` -- one partition replica: leader and follower state, HW, LSO, ISR, waiters;
* ``replica_fetcher`` -- the follower side: truncate per the truncation mode, then fetch;
* ``log`` -- a replica's log: segment files of v2 record batches on a real disk;
* ``records`` -- v2 record batches as bytes: header fields, CRC, offset/epoch stamping;
* ``producer_state`` -- idempotent-producer dedupe of retried batches;
* ``checkpoints`` -- the leader-epoch cache and the high-watermark checkpoint files;
* ``rpc`` -- controller <-> broker RPC, JSON lines over TCP;
* ``wire`` -- the Kafka wire protocol, the one adapter over kafka-python's codec;
* ``dump`` -- offline dump of a data directory (what the harness compares replicas with);
* ``events`` -- the structured event log (JSON lines of every replication decision), written here,
  read by the run record (``testbed.record.events``);
* ``controller_events`` -- the controller's events, derived from each metadata commit;
* ``localcluster`` -- a controller and brokers as local processes, no Docker needed.

May import: nothing of Tidemark outside itself -- it ships alone in the node image.  Used by:
``testbed.cluster`` (``bundled`` writes its configuration and starts it on nodes) and the
broker tests; everything else talks to it only over the Kafka protocol.
"""
