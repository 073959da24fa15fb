"""The producer's pipeline, internal: what ``send()`` hands a record to and what delivers it.

The appender (record to batch), the accumulator of per-partition batches over the buffer
pool, the partitioners, the sender task, the cluster metadata, the idempotence and
transaction managers, record futures, metrics and the helpers they share. Nothing here is
public API: the package root (:mod:`aioproducer`) exports what users need of it
(``RecordFuture``, ``BatchResults``, ``TransactionState``, ...). docs/architecture.md maps it.
"""
