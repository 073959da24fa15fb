"""What Spark's Python workers run: the compiled core from a packed environment, and a
warning when it is the plain-Python fallback.

What is proved:

- The Spark sink says, once per Python worker and at WARNING, when it runs on the
  plain-Python fallback, with the fix in the message; the compiled build says nothing
  (``AIOPRODUCER_EXPECT_COMPILED`` says which build is under test).
- docs/spark-cluster.md's recipe works: the wheel built from this tree (``tools.wheel``,
  reused when this tree was built before), installed with pyarrow into a new virtual
  environment without a C compiler, packed with ``venv-pack``, shipped with
  ``spark.archives`` to the executors of a ``local-cluster`` master (separate executor JVMs,
  as on a cluster) whose Python workers run ``./environment/bin/python``: the executors
  import aioproducer from the unpacked archive, with every hot-path module compiled, and a
  ``format("aioproducer")`` write from them reaches the broker, row for row.
- What ``--py-files`` would do instead (the wheel's files in a zip on ``sys.path``) runs the
  plain-Python fallback: a zip cannot carry the compiled modules.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa
import pyspark
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from aioproducer import compiled
from aioproducer.compiled import HOT_PATH_MODULES
from aioproducer.embedded import EmbeddedBroker
from aioproducer.integrations.spark import KafkaDataSource
from tests.support.readback import read_back
from tests.support.spark import ONCE_PER_CI_RUN

pytestmark = pytest.mark.spark

TopicFactory = Callable[..., str]
ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "support" / "spark_cluster_job.py"

# Hang guards only: the job takes about a minute (two JVMs and the archive unpacked); the
# first build of a tree's wheel compiles for several minutes.
_JOB_TIMEOUT_S = 420.0


def test_the_sink_warns_once_per_worker_only_on_the_plain_python_fallback(
    tansu: EmbeddedBroker,
    new_topic: TopicFactory,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two tasks' writes in this process, as two tasks in one reused Python worker.
    expected = os.environ.get("AIOPRODUCER_EXPECT_COMPILED")
    if expected is None:
        pytest.skip("AIOPRODUCER_EXPECT_COMPILED is not set")
    monkeypatch.setattr(compiled, "_WARNED", set())  # as in a new worker process
    topic = new_topic(tansu, partitions=1)
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    writer = KafkaDataSource(
        {"kafka.bootstrap.servers": tansu.bootstrap_servers, "topic": topic}
    ).writer(schema, False)
    arrow_schema = pa.schema([("key", pa.string()), ("value", pa.binary())])
    with caplog.at_level(logging.WARNING, logger="aioproducer.integrations.spark"):
        for task in range(2):
            rows = [{"key": f"{task}", "value": f"row {task}.{n}".encode()} for n in range(3)]
            message = writer.write(iter([pa.RecordBatch.from_pylist(rows, schema=arrow_schema)]))
            assert message.records == 3
    warnings = [
        r for r in caplog.records
        if r.name == "aioproducer.integrations.spark" and "plain-Python fallback" in r.getMessage()
    ]
    if expected == "1":
        assert warnings == []
    else:
        assert [r.levelno for r in warnings] == [logging.WARNING]
        assert warnings[0].getMessage().endswith(f"to fix it, {compiled.INSTALL_ADVICE}")
    records = read_back(tansu.bootstrap_servers, topic, expected=6)
    assert sorted(r.value for r in records) == sorted(
        f"row {task}.{n}".encode() for task in range(2) for n in range(3)
    )


def _missing_tools() -> str | None:
    for module in ("build", "venv_pack", "twine"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[release]')"
    if sys.version_info < (3, 11):
        return "tools.wheel needs Python 3.11"
    return None


@pytest.mark.wheel
@ONCE_PER_CI_RUN
def test_executors_run_the_compiled_core_from_a_packed_environment(
    tansu: EmbeddedBroker, new_topic: TopicFactory, tmp_path: Path
) -> None:
    missing = _missing_tools()
    if missing is not None:
        pytest.skip(missing)
    from tools import wheel

    built = wheel.build(ROOT)
    archive = wheel.packed_environment(built, ("pyarrow>=15",))
    topic = new_topic(tansu, partitions=2)
    rows = 5_000
    # No PYTHONPATH: the executors inherit the driver's environment, and must find
    # aioproducer in the archive alone (pyspark comes from Spark, as on a cluster).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON",
                                                            "PYSPARK_DRIVER_PYTHON")}
    # A Spark installation of links to pyspark's, as a cluster node has one: the local
    # cluster's worker keeps the executors' working directories, with their logs, in
    # SPARK_HOME/work, which is then this test's.
    spark_home = tmp_path / "spark"
    spark_home.mkdir()
    for name in ("bin", "jars", "python"):
        (spark_home / name).symlink_to(Path(pyspark.__file__).parent / name)
    env["SPARK_HOME"] = str(spark_home)
    # Spark plans a Python data source's write, and commits it, in Python processes it
    # starts on the driver with the same PYSPARK_PYTHON: in client mode the relative
    # ./environment/bin/python must be there too, in the driver's working directory.
    driver_dir = tmp_path / "driver"
    shutil.unpack_archive(archive, driver_dir / "environment")
    result = subprocess.run(
        [sys.executable, str(JOB), "--bootstrap-servers", tansu.bootstrap_servers,
         "--topic", topic, "--archive", str(archive), "--source", str(ROOT),
         "--master", "local-cluster[1,1,1024]", "--rows", str(rows), "--partitions", "2"],
        capture_output=True, text=True, timeout=_JOB_TIMEOUT_S, cwd=driver_dir, env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    executors = report["executors"]
    assert len(executors) == 2
    for executor in executors:
        # From the archive unpacked in the executor's working directory (not from this
        # tree, this interpreter's packages or the driver's copy), every module compiled.
        workdir = Path(executor["cwd"])
        assert workdir.is_relative_to(spark_home / "work"), executor
        assert Path(executor["file"]).is_relative_to(workdir / "environment"), executor
        assert Path(executor["python"]) == workdir / "environment" / "bin" / "python", executor
        assert tuple(executor["compiled"]) == HOT_PATH_MODULES, executor
    records = read_back(tansu.bootstrap_servers, topic, expected=rows)
    assert sorted((r.key, r.value) for r in records) == sorted(
        (str(n).encode(), str(n * 7).encode()) for n in range(rows)
    )
    # The executors' Python workers log to the executor's stderr: no fallback warning there.
    logs = sorted((spark_home / "work").glob("app-*/*/stderr"))
    assert logs, list((spark_home / "work").rglob("*"))
    assert all("plain-Python fallback" not in log.read_text(errors="replace") for log in logs)

    # What --py-files would ship instead: the wheel's files in a zip, first on sys.path (as
    # Spark puts it). Python imports the .py files from the zip and cannot load the compiled
    # modules beside them, even in this environment, where the compiled core is installed.
    shipped = tmp_path / "aioproducer.zip"
    with zipfile.ZipFile(built.wheel) as wheel_file, zipfile.ZipFile(shipped, "w") as out:
        for name in wheel_file.namelist():
            if not name.split("/")[0].endswith(".dist-info"):
                out.writestr(name, wheel_file.read(name))
    probe = subprocess.run(
        [str(driver_dir / "environment" / "bin" / "python"), "-c", _FROM_A_ZIP, str(shipped)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env, check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {
        "file": str(shipped / "aioproducer" / "__init__.py"), "compiled": [],
    }


_FROM_A_ZIP = """
import json, sys
sys.path.insert(0, sys.argv[1])
import aioproducer
from aioproducer.compiled import compiled_modules
print(json.dumps({"file": aioproducer.__file__, "compiled": list(compiled_modules())}))
"""
