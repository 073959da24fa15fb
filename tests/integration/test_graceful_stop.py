"""Stopping on SIGTERM: a real uvicorn process serving a FastAPI app with
``kafka_lifespan``, and a plain asyncio service using ``stop_on_signals``, each sent SIGTERM
while its producer holds records.

- ``test_uvicorn_delivers_what_was_buffered_on_sigterm``: records buffered by requests (a
  long ``linger_ms`` keeps them in the buffer) are all in the topic after SIGTERM, read back
  with confluent-kafka; uvicorn completes its application shutdown and exits well within
  the bound.
- ``test_uvicorn_says_what_it_dropped_when_the_broker_does_not_answer``: the broker holds
  every Produce answer; SIGTERM stops the process within ``close_timeout`` plus slack, and
  its log says how many records were not delivered.
- ``test_plain_asyncio_service_stops_on_sigterm_and_delivers``: ``stop_on_signals`` turns
  SIGTERM into the end of the serving block; ``close(timeout)`` then delivers every record
  the service sent, and it reports the signal.

The bounds are liveness checks with generous slack, not timings.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from aioproducer.embedded import EmbeddedBroker
from tests.faults.checks import bounded, unique_topic
from tests.faults.scripted_broker import PRODUCE, Action, ScriptedCluster
from tests.support.readback import read_back

NewTopic = Callable[..., str]

ROOT = Path(__file__).resolve().parents[2]

APP = textwrap.dedent(
    """
    import os

    from fastapi import FastAPI

    from aioproducer.integrations.fastapi import ProducerDep, kafka_lifespan

    TOPIC = os.environ["APP_TOPIC"]
    app = FastAPI(
        lifespan=kafka_lifespan(
            bootstrap_servers=os.environ["APP_BOOTSTRAP"],
            linger_ms=int(os.environ["APP_LINGER_MS"]),
            close_timeout=float(os.environ["APP_CLOSE_TIMEOUT"]),
            request_timeout_ms=60000,
            delivery_timeout_ms=int(os.environ["APP_LINGER_MS"]) + 120000,
        )
    )


    @app.post("/events/{number}")
    async def publish(number: int, producer: ProducerDep) -> dict[str, int]:
        # Buffered, not awaited: the lifespan's close delivers it.
        await producer.send(TOPIC, b"event-%d" % number, partition=0)
        return {"buffered": number}
    """
)

SERVICE = textwrap.dedent(
    """
    import asyncio
    import os
    import sys

    from aioproducer import Producer, stop_on_signals


    async def main() -> None:
        topic = os.environ["APP_TOPIC"]
        producer = Producer(bootstrap_servers=os.environ["APP_BOOTSTRAP"], linger_ms=60000)
        await producer.start()
        sent = 0
        try:
            with stop_on_signals() as stop:
                while True:
                    await producer.send(topic, b"tick-%d" % sent, partition=0)
                    sent += 1
                    if sent == 20:
                        print("ready", flush=True)
                    await asyncio.sleep(0.005)
            print(f"stopped by signal {stop.signal} after {sent} records", flush=True)
        finally:
            await producer.close(timeout=30)
        print(f"closed; sent {sent}", flush=True)


    asyncio.run(main())
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        APP_BOOTSTRAP=bootstrap,
        APP_TOPIC=topic,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")])),
        **extra,
    )
    return env


class _Uvicorn:
    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        (directory / "app.py").write_text(APP)
        self.port = _free_port()
        self.log = directory / "uvicorn.log"
        self._log_file = self.log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1",
             "--port", str(self.port)],
            cwd=directory, env=env, stdout=self._log_file, stderr=subprocess.STDOUT,
        )

    async def wait_up(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise AssertionError(f"uvicorn exited at start:\n{self.log.read_text()}")
                try:
                    await client.get(f"http://127.0.0.1:{self.port}/docs")
                    return
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
        raise AssertionError(f"uvicorn did not answer within {timeout} s:\n{self.text()}")

    async def post(self, count: int) -> None:
        async with httpx.AsyncClient() as client:
            for number in range(count):
                answer = await client.post(f"http://127.0.0.1:{self.port}/events/{number}")
                assert answer.status_code == 200, answer.text

    async def terminate(self, bound: float) -> tuple[int, float]:
        """SIGTERM; the exit status and how long the process took to exit."""
        start = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        while self.process.poll() is None:
            if time.monotonic() - start > bound:
                self.process.kill()
                raise AssertionError(f"still running {bound} s after SIGTERM:\n{self.text()}")
            await asyncio.sleep(0.05)
        return self.process.returncode, time.monotonic() - start

    def text(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log_file.close()


async def test_uvicorn_delivers_what_was_buffered_on_sigterm(
    tansu: EmbeddedBroker, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = new_topic(tansu, partitions=1)
    server = _Uvicorn(
        tmp_path,
        _env(tansu.bootstrap_servers, topic, APP_LINGER_MS="600000", APP_CLOSE_TIMEOUT="20"),
    )
    try:
        await server.wait_up()
        await server.post(30)
        status, _ = await server.terminate(bound=60)
        log = server.text()
    finally:
        server.close()
    # uvicorn (0.29 and later) raises the signal again once shut down: exit status -15.
    assert status in (0, -signal.SIGTERM), log
    assert "Waiting for application shutdown" in log and "Application shutdown complete" in log
    assert "not delivered" not in log, log
    records = await asyncio.to_thread(
        read_back, tansu.bootstrap_servers, topic, expected=30, extra_wait=1.0
    )
    assert [r.value for r in records] == [b"event-%d" % n for n in range(30)]


async def test_uvicorn_says_what_it_dropped_when_the_broker_does_not_answer(
    tmp_path: Path,
) -> None:
    topic = unique_topic("sigterm-held")
    async with ScriptedCluster(1, topics={topic: 1}) as cluster:
        hold = Action.hold()
        cluster.broker(1).default[PRODUCE] = hold
        server = _Uvicorn(
            tmp_path,
            _env(cluster.bootstrap_servers, topic, APP_LINGER_MS="0", APP_CLOSE_TIMEOUT="2"),
        )
        try:
            await server.wait_up()
            await server.post(10)
            await cluster.wait_for(lambda: bool(cluster.requests_of(PRODUCE)), timeout=30)
            status, _ = await server.terminate(bound=40)
            log = server.text()
        finally:
            server.close()
            assert hold.release is not None
            hold.release.set()
    assert status in (0, -signal.SIGTERM), log
    assert "close(timeout=2.0): 10 record(s) not delivered in time fail with " \
        "ProducerClosedError" in log, log
    assert "Application shutdown complete" in log, log


async def test_plain_asyncio_service_stops_on_sigterm_and_delivers(
    tansu: EmbeddedBroker, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = new_topic(tansu, partitions=1)
    script = tmp_path / "service.py"
    script.write_text(SERVICE)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), env=_env(tansu.bootstrap_servers, topic),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        line = await bounded(process.stdout.readline(), timeout=60)
        assert line.strip() == b"ready", line
        process.send_signal(signal.SIGTERM)
        rest = await bounded(process.stdout.read(), timeout=60)
        status = await bounded(process.wait(), timeout=60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    output = rest.decode()
    assert status == 0, output
    assert f"stopped by signal {int(signal.SIGTERM)} after" in output, output
    sent = int(output.rsplit("closed; sent ", 1)[1].split()[0])
    records = await asyncio.to_thread(
        read_back, tansu.bootstrap_servers, topic, expected=sent, extra_wait=1.0
    )
    assert [r.value for r in records] == [b"tick-%d" % n for n in range(sent)]


def test_stop_on_signals_outside_a_task_is_a_clear_error() -> None:
    from aioproducer import stop_on_signals

    async def outside() -> None:
        with stop_on_signals():
            pass

    with pytest.raises(RuntimeError, match="no running event loop"), stop_on_signals():
        pass
    asyncio.run(outside())  # inside a task: fine
