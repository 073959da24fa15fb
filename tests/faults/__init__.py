"""Fault injection: delivery guarantees under faults.

What must hold, whatever the fault: nothing acknowledged is lost, nothing is duplicated,
per-partition order is kept, every wait is bounded, failed records fail with the right error
class within their bound, and the producer still works afterwards.

Two fault injectors, each used where it can be an oracle:

- **librdkafka's mock cluster** (:class:`tests.support.mock_cluster.MockCluster`, three
  brokers, through ctypes): Produce errors pushed per request or per partition, brokers set
  down and up, leaders moved, round-trip delays, dropped connections. Every scenario reads
  the log back with confluent-kafka's consumer.
- **A scripted cluster** (:mod:`tests.faults.scripted_broker`), asyncio brokers that check
  idempotent sequences the way Kafka does (and act as transaction coordinator) and then
  misbehave on cue: append and drop the
  connection, append and never answer, answer garbage, truncated bodies, frames cut in two,
  size prefixes announcing gigabytes. Its log is an exactly-once oracle even when the client
  cannot know whether a request was written.

The checks live in :mod:`tests.faults.checks` (:class:`~tests.faults.checks.Ledger`).

Modules:

- ``test_produce_errors``: error classes (retriable, metadata-invalidating, fatal), retries,
  backoff, delivery timeout, logs and counters.
- ``test_idempotence``: producer id, sequences, five requests in flight, ambiguous outcomes
  deduplicated, sequence errors, epoch bump, in-flight expiry.
- ``test_outages``: leaders moving mid-stream, brokers down and up, a lost cluster and
  rebootstrap, reconnect backoff, slow brokers, dropped connections, a refresh race.
- ``test_backpressure``: memory under a slow broker (bytes, not time) and ``max_block_ms``.
- ``test_cancellation``: cancelled send / send_and_wait / flush / close, close and flush with
  timeouts, close while sending.
- ``test_hostile_broker``: hostile answers fail only their request, with a clear error, and
  cost no unbounded memory; the sender survives all of them.
- ``test_transactions_v2``: KIP-890 transactions v2 on the scripted cluster as coordinator
  and leaders, with and without ``transaction.version`` 2 finalized: which requests and
  versions go out, the epoch EndTxn v5 returns, aborts, and fencing on Produce v12.

Quirks that limit a check, and how the suite copes:

- The mock checks no sequence numbers for such a producer either: a Produce request
  pipelined behind one that failed is appended ahead of the retry, where Kafka would answer
  OUT_OF_ORDER_SEQUENCE_NUMBER. Mock scenarios therefore run with one request in flight
  (``checks.mock_options``); order with five in flight is proven on the scripted broker.
- A batch still in flight at its delivery deadline fails with DeliveryTimeoutError, as in
  Java, although the broker may have appended it: such records are not required to be
  absent from the log.

- The mock does not deduplicate a non-transactional idempotent producer's retries: a batch
  appended and then retried is in its log twice. Exactly-once is therefore only checked on
  the mock where errors are injected *before* the append (pushed error codes and
  ``ErrorCode.TRANSPORT`` append nothing); ambiguous outcomes (late answers, dropped
  connections after the append) are checked for exactly-once on the scripted cluster, and
  on the mock only for "nothing acknowledged lost, order of first copies kept".
- The mock answers Produce with acks=0 (Kafka does not); one scenario uses that on purpose.
- The mock's broker_set_down does not move leadership, and it advertises its own addresses
  in Metadata, so a proxy cannot interpose: the rebootstrap scenario uses two mock clusters.
- The mock's request tracking records (broker, API key, time) but not sequences or epochs;
  those are checked on the scripted cluster, which stores them with each record.
- Tansu is not used here: nothing can be injected into it, it advertises its own address
  (so a fault proxy would have to rewrite Metadata), and by its source it answers a retry
  with DUPLICATE_SEQUENCE_NUMBER and no offset and rejects a locally bumped epoch. The
  scripted cluster's ``duplicate_answer="error"`` mode reproduces the first behaviour.

Every await is bounded (:func:`tests.faults.checks.bounded`); the suite needs no network
beyond loopback and runs in about two minutes on two cores.
"""
