"""Integrations with host frameworks, each in its own module and imported only on demand.

- :mod:`aioproducer.integrations.fastapi`: a producer that lives as long as a FastAPI app
  (its lifespan), a ``get_producer`` dependency and fire-and-forget sending.
- :mod:`aioproducer.integrations.spark`: a PySpark data source named ``"aioproducer"`` that
  writes DataFrames to Kafka from the executors, and ``write_dataframe`` for older Sparks.
- :mod:`aioproducer.integrations.otel`: OpenTelemetry spans for the records sent, their
  context in the records' headers, and the producer's metrics as OpenTelemetry metrics.

Importing this package imports none of FastAPI, PySpark or OpenTelemetry; import the module
you need::

    from aioproducer.integrations.fastapi import kafka_lifespan, get_producer

Every integration is built on the public API of :mod:`aioproducer` only (OpenTelemetry
also on the producer's telemetry hook, :mod:`aioproducer.telemetry`).
"""

from __future__ import annotations

__all__: list[str] = []
