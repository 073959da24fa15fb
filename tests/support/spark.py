"""A local Spark session for the tests, with aioproducer's data source registered."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.passes import compiled_pass_only, refuse_java

ROOT = Path(__file__).resolve().parents[2]

#: Spark jobs run as processes (and clusters) of their own, a minute or more each: CI runs
#: them once, in the pass over the compiled build (the plain-Python build's sink runs in the
#: other Spark tests, and its exactly-once digest in the unit tests).
ONCE_PER_CI_RUN = compiled_pass_only("a Spark job of processes of its own, minutes long")
_ENVIRONMENT = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")


@contextlib.contextmanager
def local_spark(app_name: str, master: str = "local[2]", **configs: str) -> Iterator[Any]:
    """A ``local[2]`` session (or ``master``: ``"local[2,4]"`` lets Spark try a failed task
    4 times) named ``app_name`` with ``configs`` (Spark's own names, given as
    ``**{"spark.sql.shuffle.partitions": "2"}``), stopped on exit.

    Spark's Python workers run ``PYSPARK_PYTHON``, python3 on PATH by default: they are made
    to run this interpreter, which has pyarrow and (from the source tree, if not installed)
    aioproducer; the environment is restored on exit.
    """
    refuse_java("Spark")
    from pyspark.sql import SparkSession

    from aioproducer.integrations.spark import KafkaDataSource

    saved = {name: os.environ.get(name) for name in _ENVIRONMENT}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), saved["PYTHONPATH"]]))
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
    )
    for key, value in configs.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(KafkaDataSource)
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
