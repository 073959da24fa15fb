"""Rebootstrap on Apache Kafka: the whole cluster moves to another address while a producer
streams to it, and the bootstrap name follows it.

The producer runs in a process of its own, in a mount namespace (``unshare``) where
``/etc/hosts`` is a file the test writes: the bootstrap name ``kafka-rebootstrap.test`` maps
to ``127.0.0.2``, where the broker's client listener is. Then the broker stops, the name is
mapped to ``127.0.0.3``, and the broker starts again there (the same data, the same
cluster, the same port). The producer, which knew the broker at ``127.0.0.2`` only, must find
it again through the bootstrap name, resolved anew.

After the move the name maps to two addresses: first ``127.0.0.2``, where a listener whose
accept queue is full now drops every connection's first packet (as a firewall that drops
packets does), then ``127.0.0.3``. Every address a name resolves to is tried
(``client.dns.lookup=use_all_dns_ips``), and an address that does not answer costs one
connection attempt: the next one starts at the address after it.

``test_a_moved_cluster_is_found_again_through_the_bootstrap_name`` proves: every record the
producer reported acknowledged, before and after the move, is in the topic exactly once and
in order (read back with confluent-kafka), no record failed, records were acknowledged after
the move, and the producer logged that it rebootstrapped and that an attempt timed out at
the silent address.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.blackhole import SilentAddress
from tests.support.kafka import KafkaBroker
from tests.support.passes import refuse_java
from tests.support.readback import read_back

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
NAME = "kafka-rebootstrap.test"

PRODUCER = textwrap.dedent(
    """
    import asyncio
    import json
    import logging
    import os
    import sys

    from aioproducer import Producer, stop_on_signals

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    logging.getLogger("aioproducer.net").setLevel(logging.DEBUG)


    async def main() -> None:
        status = os.environ["APP_STATUS"]
        acked: list[str] = []
        failed: list[str] = []

        def done(value: str, future: object) -> None:
            error = future.exception()  # type: ignore[attr-defined]
            if error is None:
                acked.append(value)
            else:
                failed.append(f"{value}: {error!r}")

        async with Producer(
            bootstrap_servers=os.environ["APP_BOOTSTRAP"],
            enable_idempotence=True,
            delivery_timeout_ms=180000,
            request_timeout_ms=10000,
            reconnect_backoff_ms=100,
            reconnect_backoff_max_ms=1000,
            socket_connection_setup_timeout_ms=2000,
            socket_connection_setup_timeout_max_ms=4000,
        ) as producer:
            with stop_on_signals():
                number = 0
                while True:
                    value = "r-%06d" % number
                    topic = os.environ["APP_TOPIC"]
                    future = await producer.send(topic, value.encode(), partition=0)
                    future.add_done_callback(lambda f, v=value: done(v, f))
                    number += 1
                    if number % 10 == 0:
                        with open(status + ".tmp", "w") as out:
                            json.dump({"acked": len(acked), "failed": len(failed)}, out)
                        os.replace(status + ".tmp", status)
                    await asyncio.sleep(0.02)
        with open(status, "w") as out:
            json.dump({"acked": acked, "failed": failed, "final": True}, out)


    asyncio.run(main())
    """
)


def _hosts(*addresses: str) -> str:
    names = "".join(f"{address} {NAME}\n" for address in addresses)
    return f"127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n{names}"


def _namespaced(hosts: Path, command: list[str]) -> list[str]:
    """``command`` in a new mount namespace whose /etc/hosts is ``hosts``."""
    unshare = shutil.which("unshare")
    assert unshare is not None, "the producer gets its own /etc/hosts with unshare (util-linux)"
    options = ["--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        options.append("--map-root-user")
    inner = f"mount --bind {hosts} /etc/hosts && exec " + " ".join(f"'{part}'" for part in command)
    return [unshare, *options, "--", "sh", "-c", inner]


async def _wait_status(
    status: Path, predicate: Callable[[dict[str, Any]], bool], timeout: float, log: Path
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            current: dict[str, Any] = json.loads(status.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            current = {}
        if current and predicate(current):
            return current
        await asyncio.sleep(0.2)
    raise AssertionError(
        f"the producer did not get there within {timeout} s:\n{log.read_text()[-4000:]}"
    )


async def test_a_moved_cluster_is_found_again_through_the_bootstrap_name(tmp_path: Path) -> None:
    refuse_java("the Kafka broker")
    hosts = tmp_path / "hosts"
    hosts.write_text(_hosts("127.0.0.2"))
    status = tmp_path / "status.json"
    log = tmp_path / "producer.log"
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    with KafkaBroker(client_host="127.0.0.2") as broker:
        topic = "rebootstrap"
        broker.create_topic(topic, 1)
        env = dict(os.environ)
        env.update(
            APP_BOOTSTRAP=f"{NAME}:{broker.port}",
            APP_TOPIC=topic,
            APP_STATUS=str(status),
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")])),
        )
        silent = SilentAddress("127.0.0.2", broker.port)
        with log.open("wb") as log_file:
            process = subprocess.Popen(
                _namespaced(hosts, [sys.executable, str(script)]),
                env=env, stdout=log_file, stderr=subprocess.STDOUT,
            )
            try:
                before = await _wait_status(status, lambda s: s["acked"] >= 30, 60, log)
                # The whole cluster moves. The name now resolves to the old address first,
                # where packets are dropped from now on, then to the new one.
                hosts.write_text(_hosts("127.0.0.2", "127.0.0.3"))
                await asyncio.to_thread(
                    broker.relocate, "127.0.0.3", while_stopped=silent.__enter__
                )
                moved_at = int(before["acked"])
                await _wait_status(status, lambda s: s["acked"] >= moved_at + 60, 180, log)
                process.send_signal(signal.SIGTERM)
                await asyncio.to_thread(process.wait, 120)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
                silent.close()
        output = log.read_text()
        final = json.loads(status.read_text())
        assert process.returncode == 0, output[-4000:]
        assert final.get("final"), output[-4000:]
        assert final["failed"] == [], final["failed"][:5]
        acked = [value.encode() for value in final["acked"]]
        records = await asyncio.to_thread(
            read_back, broker.bootstrap_servers, topic, expected=len(acked), extra_wait=1.0
        )
    assert broker.bootstrap_servers.startswith("127.0.0.3:")
    values = [record.value for record in records]
    assert values == sorted(acked), (len(values), len(acked))
    assert len(set(values)) == len(values)
    assert "rebootstrapping" in output, output[-4000:]
    # The silent address was tried and passed over.
    timed_out = f"could not connect to bootstrap server {NAME}:{broker.port} at 127.0.0.2 within"
    assert timed_out in output, output[-4000:]
