"""librdkafka's mock Kafka cluster, driven through ctypes, with fault injection.

The confluent-kafka wheel bundles a librdkafka that exports the mock cluster API
(``rdkafka_mock.h``) but has no Python binding for it. :class:`MockCluster` loads that
library with ctypes and drives the mock in-process: it runs on librdkafka's own
threads and listens on loopback TCP, so any client, ours included, can connect to
:attr:`MockCluster.bootstrap_servers`.

:class:`MockClusterProcess` runs the same mock in a child Python process and proxies
the same control methods over line-based JSON on the child's stdin and stdout, for
benchmarks that must not share a process (and a GIL) with the broker::

    python tests/support/mock_cluster.py --num-brokers 3    # the server side

Known limits of the mock (see docs in /work/shared/notes/reliability.md, section 2.5):
no deduplication for idempotent producers without a transactional id, a response even
for acks=0, no SASL, topics auto-created with 4 partitions and names not validated,
and Produce responses with ``LogAppendTime = 1234``.

This module needs nothing but the standard library and the librdkafka shared object,
so the child process starts quickly.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import importlib.util
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from enum import IntEnum
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NamedTuple

__all__ = [
    "ApiKey",
    "ErrorCode",
    "MockCluster",
    "MockClusterError",
    "MockClusterProcess",
    "MockRequest",
    "find_librdkafka",
]

#: Set this to the path of a librdkafka shared object to bypass the wheel lookup.
LIBRDKAFKA_ENV = "AIOPRODUCER_LIBRDKAFKA"

_RD_KAFKA_PRODUCER = 0


class ApiKey(IntEnum):
    """The Kafka request types a producer test injects faults into."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    FIND_COORDINATOR = 10
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    SASL_AUTHENTICATE = 36
    DESCRIBE_CLUSTER = 60


class ErrorCode(IntEnum):
    """Kafka wire error codes worth injecting, plus librdkafka's transport error.

    ``TRANSPORT`` is not a wire code: pushed onto an error stack, it makes the mock
    broker drop the connection instead of answering.
    """

    TRANSPORT = -195
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    TOPIC_AUTHORIZATION_FAILED = 29
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_VERSION = 35
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    FENCED_LEADER_EPOCH = 74
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    TRANSACTION_ABORTABLE = 120


class MockRequest(NamedTuple):
    """One request the mock received while request tracking was on."""

    broker_id: int
    """The id of the mock broker the request was sent to."""
    api_key: int
    """The request type (see :class:`ApiKey`)."""
    timestamp_us: int
    """When the request arrived, in microseconds of librdkafka's monotonic clock."""


class MockClusterError(RuntimeError):
    """A mock cluster call failed; ``code`` is the librdkafka error code, if any."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def find_librdkafka() -> Path:
    """The librdkafka shared object bundled in the installed confluent-kafka wheel.

    ``$AIOPRODUCER_LIBRDKAFKA`` overrides the lookup. The file name carries an
    auditwheel hash (``librdkafka-0cb94173.so.1``), hence the glob.
    """
    override = os.environ.get(LIBRDKAFKA_ENV)
    if override:
        return Path(override)
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        raise MockClusterError("confluent-kafka is not installed: pip install confluent-kafka")
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    patterns = [
        package_dir.parent / "confluent_kafka.libs" / "librdkafka*.so*",  # Linux wheels
        package_dir / ".dylibs" / "librdkafka*.dylib",  # macOS wheels
        package_dir.parent / "confluent_kafka.libs" / "librdkafka*.dll",
    ]
    for pattern in patterns:
        matches = sorted(glob.glob(str(pattern)))
        if matches:
            return Path(matches[0])
    raise MockClusterError(
        f"no librdkafka shared object found next to {package_dir}; "
        f"set ${LIBRDKAFKA_ENV} to its path"
    )


_c_int = ctypes.c_int
_c_int16 = ctypes.c_int16
_c_int32 = ctypes.c_int32
_c_int64 = ctypes.c_int64
_c_size = ctypes.c_size_t
_c_char_p = ctypes.c_char_p
_c_void_p = ctypes.c_void_p

# (name, restype, argtypes). rd_kafka_resp_err_t is a C enum, passed as int. The
# varargs functions list only their fixed parameters: ctypes then passes the extra
# arguments as variadic ones where the platform's ABI tells them apart.
_PROTOTYPES: list[tuple[str, Any, list[Any]]] = [
    ("rd_kafka_conf_new", _c_void_p, []),
    ("rd_kafka_conf_set", _c_int, [_c_void_p, _c_char_p, _c_char_p, _c_char_p, _c_size]),
    ("rd_kafka_new", _c_void_p, [_c_int, _c_void_p, _c_char_p, _c_size]),
    ("rd_kafka_destroy", None, [_c_void_p]),
    ("rd_kafka_err2name", _c_char_p, [_c_int]),
    ("rd_kafka_mock_cluster_new", _c_void_p, [_c_void_p, _c_int]),
    ("rd_kafka_mock_cluster_destroy", None, [_c_void_p]),
    ("rd_kafka_mock_cluster_bootstraps", _c_char_p, [_c_void_p]),
    ("rd_kafka_mock_clear_request_errors", None, [_c_void_p, _c_int16]),
    (
        "rd_kafka_mock_push_request_errors_array",
        None,
        [_c_void_p, _c_int16, _c_size, ctypes.POINTER(_c_int)],
    ),
    (
        "rd_kafka_mock_broker_push_request_error_rtts",
        _c_int,
        [_c_void_p, _c_int32, _c_int16, _c_size],
    ),
    (
        "rd_kafka_mock_broker_error_stack_cnt",
        _c_int,
        [_c_void_p, _c_int32, _c_int16, ctypes.POINTER(_c_size)],
    ),
    (
        "rd_kafka_mock_partition_push_request_errors",
        _c_int,
        [_c_void_p, _c_char_p, _c_int32, _c_int16, _c_size],
    ),
    ("rd_kafka_mock_topic_set_error", None, [_c_void_p, _c_char_p, _c_int]),
    ("rd_kafka_mock_topic_create", _c_int, [_c_void_p, _c_char_p, _c_int, _c_int]),
    ("rd_kafka_mock_topic_delete", _c_int, [_c_void_p, _c_char_p]),
    ("rd_kafka_mock_partition_set_leader", _c_int, [_c_void_p, _c_char_p, _c_int32, _c_int32]),
    ("rd_kafka_mock_partition_set_follower", _c_int, [_c_void_p, _c_char_p, _c_int32, _c_int32]),
    (
        "rd_kafka_mock_partition_set_follower_wmarks",
        _c_int,
        [_c_void_p, _c_char_p, _c_int32, _c_int64, _c_int64],
    ),
    (
        "rd_kafka_mock_partition_push_leader_response",
        _c_int,
        [_c_void_p, _c_char_p, _c_int, _c_int32, _c_int32],
    ),
    ("rd_kafka_mock_broker_set_down", _c_int, [_c_void_p, _c_int32]),
    ("rd_kafka_mock_broker_set_up", _c_int, [_c_void_p, _c_int32]),
    ("rd_kafka_mock_broker_set_rtt", _c_int, [_c_void_p, _c_int32, _c_int]),
    ("rd_kafka_mock_broker_set_rack", _c_int, [_c_void_p, _c_int32, _c_char_p]),
    ("rd_kafka_mock_coordinator_set", _c_int, [_c_void_p, _c_char_p, _c_char_p, _c_int32]),
    ("rd_kafka_mock_set_apiversion", _c_int, [_c_void_p, _c_int16, _c_int16, _c_int16]),
    ("rd_kafka_mock_start_request_tracking", None, [_c_void_p]),
    ("rd_kafka_mock_stop_request_tracking", None, [_c_void_p]),
    ("rd_kafka_mock_clear_requests", None, [_c_void_p]),
    ("rd_kafka_mock_get_requests", ctypes.POINTER(_c_void_p), [_c_void_p, ctypes.POINTER(_c_size)]),
    ("rd_kafka_mock_request_id", _c_int32, [_c_void_p]),
    ("rd_kafka_mock_request_api_key", _c_int16, [_c_void_p]),
    ("rd_kafka_mock_request_timestamp", _c_int64, [_c_void_p]),
    ("rd_kafka_mock_request_destroy_array", None, [ctypes.POINTER(_c_void_p), _c_size]),
]

_library: ctypes.CDLL | None = None
_library_lock = threading.Lock()


def _load_library() -> ctypes.CDLL:
    global _library
    with _library_lock:
        if _library is None:
            library = ctypes.CDLL(str(find_librdkafka()))
            for name, restype, argtypes in _PROTOTYPES:
                try:
                    function = getattr(library, name)
                except AttributeError:
                    # Older librdkafka builds lack the newest mock functions; calling
                    # one of those raises MockClusterError instead.
                    continue
                function.restype = restype
                function.argtypes = argtypes
            _library = library
        return _library


def _encode(text: str) -> bytes:
    return text.encode("utf-8")


class MockCluster:
    """An in-process librdkafka mock cluster with ``num_brokers`` brokers (ids 1..N).

    Args:
        num_brokers: How many mock brokers to start.
        conf: librdkafka properties for the handle that owns the mock, e.g.
            ``{"debug": "mock,protocol"}`` to log what the mock does to stderr.

    Every control method is synchronous and quick: librdkafka runs the command on the
    mock's thread and waits for it. Fault-injection state (error stacks, down
    brokers, RTTs) lasts until changed or until :meth:`close`, so give each test its
    own cluster.
    """

    def __init__(self, num_brokers: int = 3, *, conf: dict[str, str] | None = None) -> None:
        if num_brokers < 1:
            raise ValueError(f"num_brokers must be at least 1, got {num_brokers}")
        self._lib = _load_library()
        self.num_brokers = num_brokers
        settings = {"log_level": "3", **(conf or {})}
        conf_handle = self._lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        for key, value in settings.items():
            if self._lib.rd_kafka_conf_set(
                conf_handle, _encode(key), _encode(value), errstr, len(errstr)
            ):
                raise MockClusterError(f"bad librdkafka property {key}={value}: {errstr.value!r}")
        # rd_kafka_new owns conf_handle from here on, even when it fails.
        self._rk: int | None = self._lib.rd_kafka_new(
            _RD_KAFKA_PRODUCER, conf_handle, errstr, len(errstr)
        )
        if not self._rk:
            raise MockClusterError(f"rd_kafka_new failed: {errstr.value.decode(errors='replace')}")
        self._cluster: int | None = self._lib.rd_kafka_mock_cluster_new(self._rk, num_brokers)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None
            raise MockClusterError("rd_kafka_mock_cluster_new failed")
        bootstraps = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster)
        self._bootstrap_servers: str = bootstraps.decode("ascii")

    # -- lifecycle ------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` of every mock broker."""
        return self._bootstrap_servers

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._cluster is None

    def close(self) -> None:
        """Destroy the mock cluster, then its librdkafka handle. Idempotent."""
        # The cluster refers to the handle, so it must go first.
        if self._cluster is not None:
            self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
            self._cluster = None
        if self._rk is not None:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self._bootstrap_servers
        return f"<MockCluster {self.num_brokers} brokers {state}>"

    # -- topics ---------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int = 1, replication_factor: int | None = None
    ) -> None:
        """Create a topic; the replication factor defaults to min(3, num_brokers), as for
        auto-created topics (which get 4 partitions on first use)."""
        if replication_factor is None:
            replication_factor = min(3, self.num_brokers)
        self._check(
            self._lib.rd_kafka_mock_topic_create(
                self._handle(), _encode(name), partitions, replication_factor
            ),
            f"create topic {name!r}",
        )

    def delete_topic(self, name: str) -> None:
        """Delete a topic (librdkafka 2.15+)."""
        self._check(
            self._function("rd_kafka_mock_topic_delete")(self._handle(), _encode(name)),
            f"delete topic {name!r}",
        )

    def topic_set_error(self, topic: str, error: int) -> None:
        """Make Metadata and AddPartitionsToTxn report ``error`` for ``topic``
        (0 clears it). Produce requests are not affected."""
        self._lib.rd_kafka_mock_topic_set_error(self._handle(), _encode(topic), int(error))

    # -- error injection ------------------------------------------------------------

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """Fail the next ``len(errors)`` requests of ``api_key``, on any broker, with
        these codes in order. ``ErrorCode.TRANSPORT`` drops the connection instead."""
        array = (_c_int * len(errors))(*(int(error) for error in errors))
        self._lib.rd_kafka_mock_push_request_errors_array(
            self._handle(), int(api_key), len(errors), array
        )

    def broker_push_request_error_rtts(
        self, broker_id: int, api_key: int, errors_and_rtts: Sequence[tuple[int, int]]
    ) -> None:
        """Answer the next requests of ``api_key`` to one broker with ``(error, rtt_ms)``
        in order: the error (0 for success) after a delay of rtt_ms. These take
        precedence over :meth:`push_request_errors`."""
        if not errors_and_rtts:
            return
        variadic: list[Any] = []
        for error, rtt_ms in errors_and_rtts:
            variadic += [_c_int(int(error)), _c_int(int(rtt_ms))]
        self._check(
            self._lib.rd_kafka_mock_broker_push_request_error_rtts(
                self._handle(), int(broker_id), int(api_key), len(errors_and_rtts), *variadic
            ),
            f"push error rtts on broker {broker_id}",
        )

    def broker_error_stack_count(self, broker_id: int, api_key: int) -> int:
        """How many injected ``(error, rtt)`` entries remain for one broker and API."""
        count = _c_size(0)
        self._check(
            self._lib.rd_kafka_mock_broker_error_stack_cnt(
                self._handle(), int(broker_id), int(api_key), ctypes.byref(count)
            ),
            f"error stack count on broker {broker_id}",
        )
        return int(count.value)

    def partition_push_request_errors(
        self, topic: str, partition: int, api_key: int, errors: Sequence[int]
    ) -> None:
        """Fail the next requests of ``api_key`` for one partition (librdkafka 2.15+).
        Broker and cluster error stacks are consulted first."""
        if not errors:
            return
        function = self._function("rd_kafka_mock_partition_push_request_errors")
        variadic = [_c_int(int(error)) for error in errors]
        self._check(
            function(
                self._handle(), _encode(topic), int(partition), int(api_key), len(errors), *variadic
            ),
            f"push partition errors on {topic}[{partition}]",
        )

    def clear_request_errors(self, api_key: int) -> None:
        """Forget the cluster-level errors still queued for ``api_key``."""
        self._lib.rd_kafka_mock_clear_request_errors(self._handle(), int(api_key))

    def set_apiversion(self, api_key: int, min_version: int, max_version: int) -> None:
        """Narrow the versions the mock advertises for ``api_key``; ``-1, -1`` removes
        the API. ``max_version`` must not exceed what the mock implements."""
        self._check(
            self._lib.rd_kafka_mock_set_apiversion(
                self._handle(), int(api_key), int(min_version), int(max_version)
            ),
            f"set api version for key {api_key}",
        )

    # -- brokers and leadership -----------------------------------------------------

    def broker_set_down(self, broker_id: int) -> None:
        """Disconnect a broker (-1 for all) and refuse new connections. Partition
        leadership does not move."""
        self._check(
            self._lib.rd_kafka_mock_broker_set_down(self._handle(), int(broker_id)),
            f"set broker {broker_id} down",
        )

    def broker_set_up(self, broker_id: int) -> None:
        """Let a broker (-1 for all) accept connections again."""
        self._check(
            self._lib.rd_kafka_mock_broker_set_up(self._handle(), int(broker_id)),
            f"set broker {broker_id} up",
        )

    def broker_set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of a broker (-1 for all) by ``rtt_ms``."""
        self._check(
            self._lib.rd_kafka_mock_broker_set_rtt(self._handle(), int(broker_id), int(rtt_ms)),
            f"set rtt on broker {broker_id}",
        )

    def broker_set_rack(self, broker_id: int, rack: str) -> None:
        """Set the rack a broker reports in Metadata."""
        self._check(
            self._lib.rd_kafka_mock_broker_set_rack(self._handle(), int(broker_id), _encode(rack)),
            f"set rack on broker {broker_id}",
        )

    def partition_set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move a partition's leadership; ``-1`` leaves it without a leader. Creates
        the topic if needed."""
        self._check(
            self._lib.rd_kafka_mock_partition_set_leader(
                self._handle(), _encode(topic), int(partition), int(broker_id)
            ),
            f"set leader of {topic}[{partition}]",
        )

    def partition_set_follower(self, topic: str, partition: int, broker_id: int) -> None:
        """Set a partition's preferred follower (read replica)."""
        self._check(
            self._lib.rd_kafka_mock_partition_set_follower(
                self._handle(), _encode(topic), int(partition), int(broker_id)
            ),
            f"set follower of {topic}[{partition}]",
        )

    def partition_push_leader_response(
        self, topic: str, partition: int, leader_id: int, leader_epoch: int
    ) -> None:
        """Make the next leader-change error for a partition carry this KIP-951
        ``current_leader`` hint."""
        self._check(
            self._lib.rd_kafka_mock_partition_push_leader_response(
                self._handle(), _encode(topic), int(partition), int(leader_id), int(leader_epoch)
            ),
            f"push leader response for {topic}[{partition}]",
        )

    def coordinator_set(self, key_type: str, key: str, broker_id: int) -> None:
        """Pin the coordinator for a ``"transaction"`` or ``"group"`` key to a broker."""
        self._check(
            self._lib.rd_kafka_mock_coordinator_set(
                self._handle(), _encode(key_type), _encode(key), int(broker_id)
            ),
            f"set {key_type} coordinator for {key!r}",
        )

    # -- request tracking -----------------------------------------------------------

    def start_request_tracking(self) -> None:
        """Start recording every request the mock receives.

        librdkafka 2.16 forgets earlier recordings here, despite its header's wording.
        """
        self._lib.rd_kafka_mock_start_request_tracking(self._handle())

    def stop_request_tracking(self) -> None:
        """Stop recording. librdkafka 2.16 also forgets what was recorded, so call
        :meth:`get_requests` first."""
        self._lib.rd_kafka_mock_stop_request_tracking(self._handle())

    def clear_requests(self) -> None:
        """Forget the recorded requests."""
        self._lib.rd_kafka_mock_clear_requests(self._handle())

    def get_requests(self) -> list[MockRequest]:
        """The requests recorded since tracking started, in arrival order."""
        count = _c_size(0)
        array = self._lib.rd_kafka_mock_get_requests(self._handle(), ctypes.byref(count))
        if not array:
            return []
        try:
            return [
                MockRequest(
                    broker_id=int(self._lib.rd_kafka_mock_request_id(array[index])),
                    api_key=int(self._lib.rd_kafka_mock_request_api_key(array[index])),
                    timestamp_us=int(self._lib.rd_kafka_mock_request_timestamp(array[index])),
                )
                for index in range(count.value)
            ]
        finally:
            # Frees each request and the array itself.
            self._lib.rd_kafka_mock_request_destroy_array(array, count.value)

    # -- internals ------------------------------------------------------------------

    def _handle(self) -> int:
        if self._cluster is None:
            raise MockClusterError("the mock cluster is closed")
        return self._cluster

    def _function(self, name: str) -> Any:
        try:
            return getattr(self._lib, name)
        except AttributeError:
            raise MockClusterError(f"this librdkafka has no {name}") from None

    def _check(self, error: int, action: str) -> None:
        if error:
            name = self._lib.rd_kafka_err2name(error)
            text = name.decode("ascii", "replace") if name else str(error)
            raise MockClusterError(f"could not {action}: {text} ({error})", code=error)


# -- the mock in a separate process ------------------------------------------------

#: The control methods a MockClusterProcess may call in its child.
_REMOTE_METHODS = frozenset(
    {
        "create_topic",
        "delete_topic",
        "topic_set_error",
        "push_request_errors",
        "broker_push_request_error_rtts",
        "broker_error_stack_count",
        "partition_push_request_errors",
        "clear_request_errors",
        "set_apiversion",
        "broker_set_down",
        "broker_set_up",
        "broker_set_rtt",
        "broker_set_rack",
        "partition_set_leader",
        "partition_set_follower",
        "partition_push_leader_response",
        "coordinator_set",
        "start_request_tracking",
        "stop_request_tracking",
        "clear_requests",
        "get_requests",
    }
)


class MockClusterProcess:
    """A :class:`MockCluster` in a child process, with the same control methods.

    The child is this module run as a script; it reads one JSON command per line on
    stdin and answers one JSON line on stdout. It exits when its stdin closes, so it
    cannot outlive its parent. librdkafka's own log lines go to a temporary file.

    Args:
        num_brokers: How many mock brokers to start.
        conf: librdkafka properties for the handle that owns the mock.
        python: The interpreter for the child; defaults to this one.
        timeout: Seconds to wait for the child to start and for each answer.
    """

    def __init__(
        self,
        num_brokers: int = 3,
        *,
        conf: dict[str, str] | None = None,
        python: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.num_brokers = num_brokers
        self._timeout = timeout
        self._next_id = 0
        self._lock = threading.Lock()
        handle, log_name = tempfile.mkstemp(prefix="aioproducer-mock-", suffix=".log")
        os.close(handle)
        self.log_path = Path(log_name)
        self._log: IO[bytes] = open(self.log_path, "wb")  # noqa: SIM115 - closed by close()
        command = [
            python or sys.executable,
            str(Path(__file__).resolve()),
            "--num-brokers",
            str(num_brokers),
            "--conf",
            json.dumps(conf or {}),
        ]
        self._process: subprocess.Popen[str] | None = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        # A reader thread lets every wait have a timeout without select() on a
        # buffered text stream.
        self._reader = threading.Thread(
            target=self._read_lines, name="mock-cluster-reader", daemon=True
        )
        self._reader.start()
        try:
            hello = self._receive()
        except BaseException:
            self.close()
            raise
        self._bootstrap_servers = str(hello["bootstrap_servers"])
        self.pid = self._process.pid

    @property
    def bootstrap_servers(self) -> str:
        """Comma-separated ``host:port`` of every mock broker."""
        return self._bootstrap_servers

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._process is None

    def close(self, timeout: float = 10.0) -> None:
        """Ask the child to destroy the cluster and exit; kill it if it does not."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        self._log.close()
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def __enter__(self) -> MockClusterProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self._bootstrap_servers
        return f"<MockClusterProcess {self.num_brokers} brokers {state}>"

    # -- the proxied control methods -----------------------------------------------

    def create_topic(
        self, name: str, partitions: int = 1, replication_factor: int | None = None
    ) -> None:
        """See :meth:`MockCluster.create_topic`."""
        self._call("create_topic", name, partitions, replication_factor)

    def delete_topic(self, name: str) -> None:
        """See :meth:`MockCluster.delete_topic`."""
        self._call("delete_topic", name)

    def topic_set_error(self, topic: str, error: int) -> None:
        """See :meth:`MockCluster.topic_set_error`."""
        self._call("topic_set_error", topic, int(error))

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """See :meth:`MockCluster.push_request_errors`."""
        self._call("push_request_errors", int(api_key), [int(error) for error in errors])

    def broker_push_request_error_rtts(
        self, broker_id: int, api_key: int, errors_and_rtts: Sequence[tuple[int, int]]
    ) -> None:
        """See :meth:`MockCluster.broker_push_request_error_rtts`."""
        pairs = [[int(error), int(rtt)] for error, rtt in errors_and_rtts]
        self._call("broker_push_request_error_rtts", broker_id, int(api_key), pairs)

    def broker_error_stack_count(self, broker_id: int, api_key: int) -> int:
        """See :meth:`MockCluster.broker_error_stack_count`."""
        return int(self._call("broker_error_stack_count", broker_id, int(api_key)))

    def partition_push_request_errors(
        self, topic: str, partition: int, api_key: int, errors: Sequence[int]
    ) -> None:
        """See :meth:`MockCluster.partition_push_request_errors`."""
        codes = [int(error) for error in errors]
        self._call("partition_push_request_errors", topic, partition, int(api_key), codes)

    def clear_request_errors(self, api_key: int) -> None:
        """See :meth:`MockCluster.clear_request_errors`."""
        self._call("clear_request_errors", int(api_key))

    def set_apiversion(self, api_key: int, min_version: int, max_version: int) -> None:
        """See :meth:`MockCluster.set_apiversion`."""
        self._call("set_apiversion", int(api_key), min_version, max_version)

    def broker_set_down(self, broker_id: int) -> None:
        """See :meth:`MockCluster.broker_set_down`."""
        self._call("broker_set_down", broker_id)

    def broker_set_up(self, broker_id: int) -> None:
        """See :meth:`MockCluster.broker_set_up`."""
        self._call("broker_set_up", broker_id)

    def broker_set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """See :meth:`MockCluster.broker_set_rtt`."""
        self._call("broker_set_rtt", broker_id, rtt_ms)

    def broker_set_rack(self, broker_id: int, rack: str) -> None:
        """See :meth:`MockCluster.broker_set_rack`."""
        self._call("broker_set_rack", broker_id, rack)

    def partition_set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """See :meth:`MockCluster.partition_set_leader`."""
        self._call("partition_set_leader", topic, partition, broker_id)

    def partition_set_follower(self, topic: str, partition: int, broker_id: int) -> None:
        """See :meth:`MockCluster.partition_set_follower`."""
        self._call("partition_set_follower", topic, partition, broker_id)

    def partition_push_leader_response(
        self, topic: str, partition: int, leader_id: int, leader_epoch: int
    ) -> None:
        """See :meth:`MockCluster.partition_push_leader_response`."""
        self._call("partition_push_leader_response", topic, partition, leader_id, leader_epoch)

    def coordinator_set(self, key_type: str, key: str, broker_id: int) -> None:
        """See :meth:`MockCluster.coordinator_set`."""
        self._call("coordinator_set", key_type, key, broker_id)

    def start_request_tracking(self) -> None:
        """See :meth:`MockCluster.start_request_tracking`."""
        self._call("start_request_tracking")

    def stop_request_tracking(self) -> None:
        """See :meth:`MockCluster.stop_request_tracking`."""
        self._call("stop_request_tracking")

    def clear_requests(self) -> None:
        """See :meth:`MockCluster.clear_requests`."""
        self._call("clear_requests")

    def get_requests(self) -> list[MockRequest]:
        """See :meth:`MockCluster.get_requests`."""
        rows = self._call("get_requests")
        return [MockRequest(int(a), int(b), int(c)) for a, b, c in rows]

    # -- the pipe -------------------------------------------------------------------

    def _read_lines(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        for line in process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _receive(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=self._timeout)
        except queue.Empty:
            raise MockClusterError(
                f"the mock cluster process did not answer within {self._timeout} s"
            ) from None
        if line is None:
            self._lines.put(None)  # later callers see the end too
            raise MockClusterError(f"the mock cluster process exited; see {self.log_path}")
        message: dict[str, Any] = json.loads(line)
        return message

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            process = self._process
            if process is None or process.stdin is None:
                raise MockClusterError("the mock cluster process is closed")
            self._next_id += 1
            request_id = self._next_id
            request = {"id": request_id, "method": method, "args": list(args)}
            try:
                process.stdin.write(json.dumps(request) + "\n")
                process.stdin.flush()
            except OSError as exc:
                raise MockClusterError(f"the mock cluster process is gone: {exc}") from exc
            answer = self._receive()
        if answer.get("id") != request_id:
            raise MockClusterError(f"answer out of order: {answer!r}")
        if "error" in answer:
            raise MockClusterError(str(answer["error"]), code=answer.get("code"))
        return answer.get("result")


def _serve(num_brokers: int, conf: dict[str, str], commands: IO[str], answers: IO[str]) -> None:
    """The child side of :class:`MockClusterProcess`: one JSON command per line."""

    def send(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    with MockCluster(num_brokers, conf=conf) as cluster:
        send({"bootstrap_servers": cluster.bootstrap_servers})
        for line in commands:
            if not line.strip():
                continue
            request: dict[str, Any] = {}
            try:
                request = json.loads(line)
                method = str(request["method"])
                if method not in _REMOTE_METHODS:
                    raise MockClusterError(f"unknown method {method!r}")
                args = request.get("args", [])
                if method == "broker_push_request_error_rtts":
                    args = [args[0], args[1], [tuple(pair) for pair in args[2]]]
                result = getattr(cluster, method)(*args)
                if method == "get_requests":
                    result = [list(row) for row in result]
                send({"id": request.get("id"), "result": result})
            except Exception as exc:
                send(
                    {
                        "id": request.get("id"),
                        "error": f"{type(exc).__name__}: {exc}",
                        "code": getattr(exc, "code", None),
                    }
                )


def main(argv: Iterable[str] | None = None) -> None:
    """Run a mock cluster controlled over stdin/stdout (see :class:`MockClusterProcess`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--num-brokers", type=int, default=3)
    parser.add_argument("--conf", default="{}", help="librdkafka properties as a JSON object")
    options = parser.parse_args(list(argv) if argv is not None else None)
    # The answers get a private copy of stdout; fd 1 then points at stderr, so
    # nothing librdkafka or a library prints can corrupt the protocol.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _serve(options.num_brokers, json.loads(options.conf), sys.stdin, answers)


if __name__ == "__main__":
    main()
