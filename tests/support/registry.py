"""A real Schema Registry for the tests: Apicurio Registry, through its Confluent-compatible
API (``/apis/ccompat/v7``), in-memory, started in a JVM by the fixture.

Its runnable distribution comes from Maven Central
(``io.apicurio:apicurio-registry-app:3.0.9:tar.gz:all``, about 110 MB), fetched with Maven on
first use into ``~/.cache/aioproducer/apicurio-3.0.9`` (``$XDG_CACHE_HOME`` is honoured).
Java 17 runs it; it is ready in about 10 seconds. Without Java or Maven the fixture skips
(fails under ``CI``), as the Kafka fixtures do.

Apicurio differs from Confluent's registry where these tests could meet it: ids are per
content (one schema registered under two subjects has one id), and a subject has no
compatibility rule until one is set (``PUT /config/{subject}``), so registering an
incompatible schema succeeds until then.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.support.kafka import _cache_root, _file_lock

VERSION = "3.0.9"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all"
_RUNNER = f"apicurio-registry-app-{VERSION}-runner.jar"
_MAVEN_TIMEOUT = 900.0
_START_TIMEOUT = 120.0


class RegistryUnavailableError(RuntimeError):
    """Apicurio cannot run here (no Java, no Maven, or the download failed)."""


def apicurio_home() -> Path:
    """The unpacked distribution, fetched first if needed."""
    target = _cache_root() / f"apicurio-{VERSION}"
    if (target / _RUNNER).is_file():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RegistryUnavailableError(f"Maven (`mvn`) is needed to fetch {ARTIFACT}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if (target / _RUNNER).is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            command = [
                mvn,
                "-B",
                "-q",
                "-Dstyle.color=never",
                "dependency:copy",
                f"-Dartifact={ARTIFACT}",
                f"-DoutputDirectory={staging}",
            ]
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT, check=False
            )
            archives = list(staging.glob("*.tar.gz"))
            if done.returncode != 0 or not archives:
                raise RegistryUnavailableError(
                    f"fetching {ARTIFACT} failed ({done.returncode}): "
                    f"{(done.stdout + done.stderr)[-2000:]}"
                )
            unpacked = staging / "dist"
            with tarfile.open(archives[0]) as archive:
                archive.extractall(unpacked, filter="data")
            if not (unpacked / _RUNNER).is_file():
                raise RegistryUnavailableError(f"{ARTIFACT} holds no {_RUNNER}")
            if target.exists():
                shutil.rmtree(target)
            unpacked.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ApicurioRegistry:
    """One Apicurio Registry process; ``url`` is its Confluent-compatible API."""

    def __init__(self, log_dir: Path) -> None:
        if shutil.which("java") is None:
            raise RegistryUnavailableError("Java is needed to run Apicurio Registry")
        self.home = apicurio_home()
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/apis/ccompat/v7"
        self.log_path = log_dir / f"apicurio-{self.port}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            [
                "java",
                "-Xmx256m",
                f"-Dquarkus.http.port={self.port}",
                "-Dquarkus.http.host=127.0.0.1",
                "-jar",
                str(self.home / _RUNNER),
            ],
            cwd=self.home,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ},
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RegistryUnavailableError(
                    f"Apicurio exited with {self._process.returncode}: see {self.log_path}"
                )
            try:
                with urllib.request.urlopen(f"{self.base}/health/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise RegistryUnavailableError(
            f"Apicurio was not ready within {_START_TIMEOUT:.0f} s: see {self.log_path}"
        )

    def stop(self) -> None:
        """Stop the process (its in-memory registry goes with it)."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        self._log.close()
