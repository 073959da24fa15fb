"""A deterministic simulation of the real producer against a model of a Kafka cluster.

In the spirit of FoundationDB's simulation and TigerBeetle's VOPR, with Jepsen-style checks:
one process, a virtual clock, every choice drawn from one ``random.Random(seed)``.

- :mod:`tests.sim.model`: the broker rules (partitions, replicated logs, producer state,
  the transaction coordinator), each citing the Kafka class it follows.
- :mod:`tests.sim.network`: fake connections (in-order answers, in-flight limits, drops,
  request timeouts) standing in for the connection manager.
- :mod:`tests.sim.simulation`: draws a configuration and faults per seed, wires the real
  Sender, RecordAccumulator, BufferPool, Metadata, IdempotenceManager /
  TransactionManager and ProducerMetrics, and runs the discrete-event loop.
- :mod:`tests.sim.checks`: the invariants checked after every run.
- :mod:`tests.sim.runner` and ``python -m tests.sim``: run seeds, replay one with its trace.
"""
