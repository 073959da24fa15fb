"""Integrations with host frameworks, each in its own module and imported only on demand.

- :mod:`aioproducer.integrations.fastapi`: a producer that lives as long as a FastAPI app
  (its lifespan), a ``get_producer`` dependency and fire-and-forget sending.
- :mod:`aioproducer.integrations.spark`: a PySpark data source named ``"aioproducer"`` that
  writes DataFrames to Kafka from the executors, and ``write_dataframe`` for older Sparks.

Importing this package imports neither FastAPI nor PySpark; import the module you need::

    from aioproducer.integrations.fastapi import kafka_lifespan, get_producer

Every integration is built on the public API of :mod:`aioproducer` only.
"""

from __future__ import annotations

__all__: list[str] = []
