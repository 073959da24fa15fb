"""ProducerConfig: every producer option, typed, frozen and validated once.

Build a configuration with :meth:`ProducerConfig.from_options`. It takes a mapping whose keys
are the snake_case field names or the Java client's dotted names (``"linger.ms"``), and keyword
options, which win over the mapping::

    config = ProducerConfig.from_options({"bootstrap.servers": "k1:9092,k2:9092"}, linger_ms=20)

Defaults and rules follow the Java producer of Kafka 4.x, including how it resolves options
that conflict:

* ``enable_idempotence`` defaults to True. Idempotence needs ``acks="all"``, ``retries > 0`` and
  ``max_in_flight_requests_per_connection <= 5``. When the user set ``enable_idempotence=True``
  and one of these does not hold, that is an error; when idempotence was left at its default,
  it is silently turned off instead (``acks=1`` alone gives a plain, non-idempotent producer).
* ``transactional_id`` needs idempotence.
* ``delivery_timeout_ms`` must be at least ``linger_ms + request_timeout_ms``. A value the user
  set below that is an error; the default is raised to that sum with a warning.

Unknown names and invalid values raise :class:`~aioproducer.errors.ConfigurationError` (a
``ValueError``) naming the option. Secrets (``ssl_password``, ``sasl_plain_password``, the
key and trust store passwords, a PEM key given as text, ``sasl_jaas_config``) never appear in
``repr()`` or in error messages. Java producer options with no counterpart here are refused
together, in one error saying what to do instead, unless their value changes nothing
(:func:`is_java_only`).

The Java client's ``sasl.jaas.config`` (and its OAUTHBEARER token endpoint options) set the
``sasl_*`` options as the Java client reads them: see :mod:`aioproducer.jaas`.

Building ``ProducerConfig(...)`` directly validates too, but treats every value as set by the
user: ``ProducerConfig(acks=0)`` is an error, ``ProducerConfig.from_options(acks=0)`` is a
non-idempotent producer.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import os
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from aioproducer._core.partitioner import PARTITIONER_NAMES
from aioproducer._java_config import (
    FOREIGN_NAMES,
    JAVA_PARTITIONERS,
    apply_java_sasl,
    check_stores,
    is_java_only,
    without_java_only,
)
from aioproducer.errors import ConfigurationError
from aioproducer.serialization import Serializer, with_context

if TYPE_CHECKING:
    from aioproducer._core.partitioner import Partitioner, PartitionFunction

__all__ = [
    "OptionInfo",
    "ProducerConfig",
    "is_java_only",
    "names_a_secret",
    "option_field_name",
    "options_table",
]

log = logging.getLogger("aioproducer.config")

_INT_MAX: Final = 2**31 - 1
_LONG_MAX: Final = 2**63 - 1
#: The broker keeps sequence state for the last five batches per partition, so an idempotent
#: producer can have at most five requests in flight per connection without risking reordering.
_MAX_IN_FLIGHT_FOR_IDEMPOTENCE: Final = 5
_DEFAULT_PORT: Final = 9092
_SECRET = "***"

# KIP-511: client software name and version must match this, or the broker rejects ApiVersions.
_SOFTWARE_RE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

# Compression levels per codec, as KIP-390 defines them for the Java client (gzip also takes
# -1, zlib's "default level").
_LEVEL_RANGES: Final[Mapping[str, tuple[int, int]]] = {
    "gzip": (1, 9),
    "lz4": (1, 17),
    "zstd": (-131072, 22),
}

_client_numbers = itertools.count(1)


def _next_client_id() -> str:
    return f"aioproducer-{next(_client_numbers)}"


def _package_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        raw = version("aioproducer")
    except (ImportError, PackageNotFoundError):
        # Running from a source tree that is not installed: still send a valid version.
        raw = "unknown"
    # Local versions ("0.1.0+g1234") carry characters KIP-511 forbids.
    cleaned = re.sub(r"[^a-zA-Z0-9\-.]", "-", raw).strip("-.")
    return cleaned or "unknown"


# ---- value checks ---------------------------------------------------------------------------
#
# Each check takes the option's field name and the raw value and returns the normalized value,
# or raises ConfigurationError. Values from Java-style property files arrive as strings, so the
# numeric and boolean checks accept their string forms.

_Check = Callable[[str, Any], Any]
# The token provider too: given a token string by mistake, it would show the token.
_SECRET_FIELDS: Final = frozenset(
    {
        "ssl_password",
        "sasl_plain_password",
        "sasl_oauth_token_provider",
        "ssl_truststore_password",
        "ssl_keystore_password",
        "ssl_keystore_key",
        # The JAAS line holds a password or a client secret.
        "sasl_jaas_config",
    }
)
# The Java client's names for the same TLS material as the ssl_* files.
_SSL_STORE_FIELDS: Final = (
    "ssl_truststore_location",
    "ssl_truststore_password",
    "ssl_truststore_type",
    "ssl_truststore_certificates",
    "ssl_keystore_location",
    "ssl_keystore_password",
    "ssl_keystore_type",
    "ssl_keystore_certificate_chain",
    "ssl_keystore_key",
)
_SSL_FILE_FIELDS: Final = (
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password",
    *_SSL_STORE_FIELDS,
)
#: Words that, inside a part of an option's name, mark its value as a secret.
_SECRET_NAME_WORDS: Final = ("password", "passwd", "secret", "token", "credential", "jaas")


def names_a_secret(name: str) -> bool:
    """Whether an option called ``name`` (by any client's name, in any spelling) most
    likely holds a secret, for the places that show or store option values: a part of
    the name (split at ``.``, ``_`` and ``-``) holds ``password``, ``secret``, ``token``,
    ``credential`` or ``jaas``, or is or ends in ``key`` (``ssl.keystore.key``,
    ``apikey``). Serializers (``key.serializer``) and file locations (``ssl.keyfile``,
    ``ssl.keystore.location``) name no secret."""
    lowered = name.lower()
    if "serializer" in lowered:
        return False
    parts = [part for part in re.split(r"[._\-]", lowered) if part]
    return any(
        part.endswith("key") or any(word in part for word in _SECRET_NAME_WORDS)
        for part in parts
    )
# Filled from the field metadata once ProducerConfig exists; error messages show both names.
_JAVA_NAME: dict[str, str] = {}


def _label(name: str) -> str:
    java = _JAVA_NAME.get(name)
    return f"{name} ({java})" if java else name


def _invalid(name: str, problem: str, value: Any) -> ConfigurationError:
    shown = f"a value of type {type(value).__name__}" if name in _SECRET_FIELDS else repr(value)
    return ConfigurationError(f"{_label(name)} {problem}, got {shown}")


def _int_between(low: int, high: int = _INT_MAX) -> _Check:
    if high in (_INT_MAX, _LONG_MAX):
        problem = f"must be an integer >= {low}"
    else:
        problem = f"must be an integer from {low} to {high}"

    def check(name: str, value: Any) -> int:
        number = value
        if isinstance(value, str):
            try:
                number = int(value.strip())
            except ValueError:
                raise _invalid(name, problem, value) from None
        if type(number) is not int or not low <= number <= high:
            # bool is an int subclass; True as a timeout is a mistake, not 1 ms.
            raise _invalid(name, problem, value)
        return number

    return check


def _fraction(*, low_open: bool = False, high_open: bool = False) -> _Check:
    low, high = ("(0" if low_open else "[0"), ("1)" if high_open else "1]")
    problem = f"must be a number in {low}, {high}"

    def check(name: str, value: Any) -> float:
        number = value
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                raise _invalid(name, problem, value) from None
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise _invalid(name, problem, value)
        number = float(number)
        if not (number > 0.0 if low_open else number >= 0.0) or not (
            number < 1.0 if high_open else number <= 1.0
        ):
            raise _invalid(name, problem, value)
        return number

    return check


def _boolean(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _invalid(name, "must be True or False", value)


def _optional_str(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _invalid(name, "must be a string or None", value)


def _non_empty_optional_str(name: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise _invalid(name, "must be a non-empty string or None", value)


def _non_empty_string(name: str, value: Any) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise _invalid(name, "must be a non-empty string", value)


def _string(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _invalid(name, "must be a string", value)


def _optional_path(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return path
    raise _invalid(name, "must be a file path or None", value)


def _one_of(*choices: str, upper: bool = False) -> _Check:
    problem = "must be one of " + ", ".join(repr(c) for c in choices)

    def check(name: str, value: Any) -> str:
        if isinstance(value, str):
            text = value.strip().upper() if upper else value.strip().lower()
            if text in choices:
                return text
        raise _invalid(name, problem, value)

    return check


def _optional_callable(name: str, value: Any) -> Any:
    if value is None or callable(value):
        return value
    raise _invalid(name, "must be a callable or None", value)


def _serializer(name: str, value: Any) -> Any:
    is_key = getattr(value, "is_key", None)
    if isinstance(is_key, bool) and is_key != (name == "key_serializer"):
        made_for = "keys (is_key=True)" if is_key else "values (is_key=False)"
        raise _invalid(name, f"is a serializer made for {made_for}", value)
    if value is None or callable(value) or with_context(value):
        return value
    raise _invalid(
        name, "must be a callable of one argument, a Serializer (with serialize()) or None", value
    )


def _acks(name: str, value: Any) -> int:
    text = value.strip().lower() if isinstance(value, str) else value
    if text == "all" or (type(text) is int and text == -1) or text == "-1":
        return -1
    if (type(text) is int and text in (0, 1)) or text in ("0", "1"):
        return int(text)
    raise _invalid(name, "must be 'all', -1, 0 or 1", value)


def _split_servers(value: Any) -> list[str] | None:
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
        parts = [part for item in value for part in item.split(",")]
    else:
        return None
    return [part.strip() for part in parts if part.strip()]


def _parse_address(entry: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port``, bare ``host``, ``v6`` or ``scheme://host:port``)."""
    text = entry.split("://", 1)[1] if "://" in entry else entry
    port_text = ""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError("an IPv6 address in brackets must look like [::1]:9092")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        # No colon: a bare host. Several colons and no brackets: a bare IPv6 address, since
        # "::1:9092" cannot be told apart from the address ::1:9092.
        host = text
    if not host:
        raise ValueError("the host is empty")
    if not port_text:
        return host, _DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"the port {port_text!r} is not a number from 1 to 65535")
    return host, int(port_text)


def _bootstrap(name: str, value: Any) -> tuple[str, ...]:
    servers = _split_servers(value)
    if servers is None:
        raise _invalid(name, "must be a 'host:port,host:port' string or a list of them", value)
    if not servers:
        raise _invalid(name, "must name at least one server", value)
    for server in servers:
        try:
            _parse_address(server)
        except ValueError as exc:
            raise _invalid(name, f"has an invalid address {server!r}: {exc}", value) from None
    return tuple(servers)


def _partitioner(name: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        text = JAVA_PARTITIONERS.get(value.strip(), value.strip().lower())
        if text in PARTITIONER_NAMES:
            return text
        raise _invalid(
            name,
            "must be None, one of "
            + ", ".join(repr(n) for n in PARTITIONER_NAMES)
            + ", a Partitioner or a callable (topic, key_bytes, partition_count) -> int",
            value,
        )
    if isinstance(value, type):
        raise _invalid(name, "must be a partitioner instance, not a class", value)
    if callable(getattr(value, "partition", None)) or callable(value):
        return value
    raise _invalid(name, "must be a partitioner name, a Partitioner or a callable", value)


def _interceptors(name: str, value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _invalid(name, "must be a sequence (list or tuple) of interceptors", value)
    for item in value:
        if not (
            callable(getattr(item, "on_send", None))
            and callable(getattr(item, "on_acknowledgement", None))
        ):
            raise _invalid(
                name, "must hold objects with on_send() and on_acknowledgement() methods", item
            )
    return tuple(value)


def _ssl_context(name: str, value: Any) -> ssl.SSLContext | None:
    if value is None or isinstance(value, ssl.SSLContext):
        return value
    raise _invalid(name, "must be an ssl.SSLContext or None", value)


_STORE_TYPES: Final = ("PKCS12", "PEM", "JKS")


def _store_type(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().upper() in _STORE_TYPES:
        return value.strip().upper()
    raise _invalid(name, "must be 'PKCS12', 'PEM', 'JKS' or None", value)


def _endpoint_identification(name: str, value: Any) -> bool:
    """ssl.endpoint.identification.algorithm: 'https' checks the host name, '' does not
    (True and False are taken as ssl_check_hostname takes them)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("https", ""):
        return value.strip().lower() == "https"
    raise ConfigurationError(
        "ssl.endpoint.identification.algorithm must be 'https' (check that the broker's "
        "certificate names the host) or '' (do not check), got "
        + (repr(value) if isinstance(value, str) else f"a value of type {type(value).__name__}")
    )


def _token_provider(name: str, value: Any) -> Any:
    if value is None or callable(getattr(value, "token", None)) or callable(value):
        return value
    raise _invalid(
        name, "must be an object with a token() method, a callable returning a token, or None",
        value,
    )


def _sasl_mechanism(name: str, value: Any) -> str:
    return str(
        _one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", upper=True)(
            name, value
        )
    )


def _optional_timeout(name: str, value: Any) -> int | None:
    return None if value is None else int(_int_between(0)(name, value))


_any_int = _int_between(-(2**31))


def _optional_int(name: str, value: Any) -> int | None:
    # The range depends on compression_type; __post_init__ checks it.
    return None if value is None else int(_any_int(name, value))


def _software(name: str, value: Any) -> str:
    if isinstance(value, str) and _SOFTWARE_RE.fullmatch(value):
        return value
    raise _invalid(
        name,
        "must be letters, digits, '-' and '.', starting and ending with a letter or digit",
        value,
    )


# ---- the options ----------------------------------------------------------------------------


def _meta(
    *,
    java: str | None,
    doc: str,
    check: _Check,
    aliases: tuple[str, ...] = (),
    shown_default: Any = MISSING,
    java_value: _Check | None = None,
) -> dict[str, Any]:
    """The metadata of one option: Java name, other accepted names, doc line and value check.

    ``java_value`` turns a value given under the Java name into this option's value, where
    the Java client spells it differently.
    """
    return {
        "java": java,
        "java_value": java_value,
        "doc": doc,
        "check": check,
        "aliases": aliases,
        "shown_default": shown_default,
    }


@dataclass(frozen=True, slots=True, repr=False)
class ProducerConfig:
    """Every option of the producer; build it with :meth:`from_options`.

    The field names are the Java client's option names in snake_case (``linger.ms`` is
    ``linger_ms``); :func:`options_table` lists each option with its Java name, default and
    meaning. Instances are immutable and validated when created.
    """

    # connection
    bootstrap_servers: tuple[str, ...] = field(
        default=("localhost:9092",),
        metadata=_meta(
            java="bootstrap.servers",
            doc="Brokers to fetch the first metadata from: 'host:port,host:port' or a list; "
            "IPv6 as '[::1]:9092'; the port defaults to 9092. start() refuses a list in "
            "which no host name resolves.",
            check=_bootstrap,
            shown_default="localhost:9092",
        ),
    )
    client_id: str = field(
        default_factory=_next_client_id,
        metadata=_meta(
            java="client.id",
            doc="A name for this producer in broker logs and quotas.",
            check=_string,
            shown_default="aioproducer-<n>",
        ),
    )
    # delivery
    acks: int = field(
        default=-1,
        metadata=_meta(
            java="acks",
            doc="Acknowledgements the leader waits for: 'all' (-1, every in-sync replica), 1 "
            "(the leader only) or 0 (none); stored as an int.",
            check=_acks,
            shown_default="all",
        ),
    )
    linger_ms: int = field(
        default=5,
        metadata=_meta(
            java="linger.ms",
            doc="How long a batch waits for more records before it is sent, counted in whole "
            "milliseconds as the Java client counts it: a batch started partway through a "
            "millisecond may leave up to 1 ms sooner.",
            check=_int_between(0),
        ),
    )
    batch_size: int = field(
        default=16384,
        metadata=_meta(
            java="batch.size",
            doc="The size in bytes a batch is filled to before it is sent; also the unit the "
            "sticky partitioner switches partitions at. With a codec, as in the Java client, "
            "the size the batch is expected to have once compressed (from the ratio of the "
            "topic's batches so far; at most 8 times batch_size and an eighth of "
            "buffer_memory of records).",
            check=_int_between(0),
        ),
    )
    buffer_memory: int = field(
        default=33554432,
        metadata=_meta(
            java="buffer.memory",
            doc="Total bytes of records waiting to be sent; send() blocks when it is used up.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    max_block_ms: int = field(
        default=60000,
        metadata=_meta(
            java="max.block.ms",
            doc="How long start() may wait for a bootstrap server, and send() and "
            "partitions_for() for metadata or buffer memory, before they fail.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    delivery_timeout_ms: int = field(
        default=120000,
        metadata=_meta(
            java="delivery.timeout.ms",
            doc="Upper bound on the time from send() to success or failure, retries included; "
            "at least linger_ms + request_timeout_ms.",
            check=_int_between(0),
        ),
    )
    request_timeout_ms: int = field(
        default=30000,
        metadata=_meta(
            java="request.timeout.ms",
            doc="How long to wait for the response to one request before retrying it.",
            check=_int_between(0),
        ),
    )
    retries: int = field(
        default=_INT_MAX,
        metadata=_meta(
            java="retries",
            doc="How often a failed batch is retried; prefer bounding delivery_timeout_ms.",
            check=_int_between(0),
        ),
    )
    retry_backoff_ms: int = field(
        default=100,
        metadata=_meta(
            java="retry.backoff.ms",
            doc="The first wait before retrying a failed request; doubles on each attempt.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    retry_backoff_max_ms: int = field(
        default=1000,
        metadata=_meta(
            java="retry.backoff.max.ms",
            doc="The longest wait between retries of a failed request.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    reconnect_backoff_ms: int = field(
        default=50,
        metadata=_meta(
            java="reconnect.backoff.ms",
            doc="The first wait before reconnecting to a broker; doubles on each failure.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    reconnect_backoff_max_ms: int = field(
        default=1000,
        metadata=_meta(
            java="reconnect.backoff.max.ms",
            doc="The longest wait before reconnecting to a broker.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    socket_connection_setup_timeout_ms: int = field(
        default=10000,
        metadata=_meta(
            java="socket.connection.setup.timeout.ms",
            doc="How long a connection attempt (TCP, TLS and SASL) may take; doubles on each "
            "failure.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    socket_connection_setup_timeout_max_ms: int = field(
        default=30000,
        metadata=_meta(
            java="socket.connection.setup.timeout.max.ms",
            doc="The longest a connection attempt may take.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    connections_max_idle_ms: int = field(
        default=540000,
        metadata=_meta(
            java="connections.max.idle.ms",
            doc="Close connections idle for this long; -1 keeps them open.",
            check=_int_between(-1, _LONG_MAX),
        ),
    )
    max_in_flight_requests_per_connection: int = field(
        default=5,
        metadata=_meta(
            java="max.in.flight.requests.per.connection",
            doc="Requests sent to one broker without waiting for their responses; at most 5 "
            "for an idempotent producer.",
            check=_int_between(1),
        ),
    )
    # idempotence and transactions
    enable_idempotence: bool = field(
        default=True,
        metadata=_meta(
            java="enable.idempotence",
            doc="Write each record exactly once per partition, in order, despite retries; "
            "needs acks='all'. Turned off silently by conflicting options unless set explicitly.",
            check=_boolean,
        ),
    )
    transactional_id: str | None = field(
        default=None,
        metadata=_meta(
            java="transactional.id",
            doc="Enables transactions under this id; needs idempotence.",
            check=_non_empty_optional_str,
        ),
    )
    transaction_timeout_ms: int = field(
        default=60000,
        metadata=_meta(
            java="transaction.timeout.ms",
            doc="How long the coordinator lets a transaction stay open before aborting it.",
            check=_int_between(1),
        ),
    )
    # batches
    compression_type: str = field(
        default="none",
        metadata=_meta(
            java="compression.type",
            doc="Codec for record batches: none, gzip, snappy, lz4 or zstd.",
            check=_one_of("none", "gzip", "snappy", "lz4", "zstd"),
        ),
    )
    compression_level: int | None = field(
        default=None,
        metadata=_meta(
            java=None,
            aliases=("compression.level",),
            doc="Codec level (gzip 1-9 or -1, lz4 1-17, zstd -131072-22); None for the codec's "
            "default (the Java client's compression.<codec>.level).",
            check=_optional_int,
        ),
    )
    compression_offload_bytes: int | None = field(
        default=None,
        metadata=_meta(
            java=None,
            aliases=("compression.offload.bytes",),
            doc="Uncompressed record bytes from which a batch is compressed in a worker thread "
            "instead of on the event loop. None picks a measured default per codec (gzip 8 KiB, "
            "zstd 64 KiB, lz4 and snappy 128 KiB); 0 sends every compressed batch to the "
            "thread; -1 never does.",
            check=_optional_int,
        ),
    )
    max_request_size: int = field(
        default=1048576,
        metadata=_meta(
            java="max.request.size",
            doc="The largest produce request in bytes, and so the largest record.",
            check=_int_between(0),
        ),
    )
    # metadata
    metadata_max_age_ms: int = field(
        default=300000,
        metadata=_meta(
            java="metadata.max.age.ms",
            doc="Refresh metadata at least this often, even without errors.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    metadata_max_idle_ms: int = field(
        default=300000,
        metadata=_meta(
            java="metadata.max.idle.ms",
            doc="Forget the metadata of a topic not produced to for this long.",
            check=_int_between(5000, _LONG_MAX),
        ),
    )
    metadata_recovery_strategy: str = field(
        default="rebootstrap",
        metadata=_meta(
            java="metadata.recovery.strategy",
            doc="What to do when no known broker can be reached, or no metadata came for "
            "metadata_recovery_rebootstrap_trigger_ms: 'rebootstrap' (resolve and contact "
            "the bootstrap servers again, as Java's 4.x default) or 'none' (keep trying the "
            "known brokers only).",
            check=_one_of("rebootstrap", "none"),
        ),
    )
    metadata_recovery_rebootstrap_trigger_ms: int = field(
        default=300000,
        metadata=_meta(
            java="metadata.recovery.rebootstrap.trigger.ms",
            doc="With metadata_recovery_strategy 'rebootstrap': go back to the bootstrap "
            "servers when no metadata could be had from the known brokers for this long, "
            "even though some of them can still be connected to.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    # partitioning
    partitioner: str | PartitionFunction | Partitioner | None = field(
        default=None,
        metadata=_meta(
            java="partitioner.class",
            doc="None or 'default' (murmur2 of the key, sticky for null keys), 'uniform_sticky', "
            "'round_robin', 'murmur3', 'consistent', a Partitioner, or a callable "
            "(topic, key_bytes, partition_count) -> int.",
            check=_partitioner,
        ),
    )
    partitioner_ignore_keys: bool = field(
        default=False,
        metadata=_meta(
            java="partitioner.ignore.keys",
            doc="The default partitioner ignores keys and spreads every record like null-key ones.",
            check=_boolean,
        ),
    )
    partitioner_adaptive_partitioning_enable: bool = field(
        default=True,
        metadata=_meta(
            java="partitioner.adaptive.partitioning.enable",
            doc="The sticky partitioner favours partitions whose brokers keep up (shorter queues).",
            check=_boolean,
        ),
    )
    partitioner_availability_timeout_ms: int = field(
        default=0,
        metadata=_meta(
            java="partitioner.availability.timeout.ms",
            doc="The sticky partitioner skips partitions whose broker has not taken ready batches "
            "for this long; 0 disables this.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    # serialization and hooks
    key_serializer: Callable[[Any], bytes | None] | Serializer[Any] | None = field(
        default=None,
        metadata=_meta(
            java="key.serializer",
            doc="Turns a record key into bytes (or None): a callable of one argument, or a "
            "Serializer that also sees the topic and headers (aioproducer.serialization; "
            "confluent-kafka's serializers too). None sends bytes as is. A None key is never "
            "passed to it: it stays None.",
            check=_serializer,
        ),
    )
    value_serializer: Callable[[Any], bytes | None] | Serializer[Any] | None = field(
        default=None,
        metadata=_meta(
            java="value.serializer",
            doc="Turns a record value into bytes (or None): a callable of one argument, or a "
            "Serializer that also sees the topic and headers (aioproducer.serialization; "
            "confluent-kafka's serializers too). None sends bytes as is. A None value is never "
            "passed to it: it stays None.",
            check=_serializer,
        ),
    )
    interceptors: tuple[Any, ...] = field(
        default=(),
        metadata=_meta(
            java="interceptor.classes",
            doc="Objects whose on_send(record) and on_acknowledgement(metadata, exc) see every "
            "record.",
            check=_interceptors,
        ),
    )
    # security
    security_protocol: str = field(
        default="PLAINTEXT",
        metadata=_meta(
            java="security.protocol",
            doc="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
            check=_one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", upper=True),
        ),
    )
    ssl_context: ssl.SSLContext | None = field(
        default=None,
        metadata=_meta(
            java=None,
            doc="A ready ssl.SSLContext for SSL and SASL_SSL; else one is built from the ssl_* "
            "files.",
            check=_ssl_context,
        ),
    )
    ssl_cafile: str | None = field(
        default=None,
        metadata=_meta(
            java=None,
            aliases=("ssl.ca.location",),
            doc="PEM file of the CAs to trust; None uses the system's.",
            check=_optional_path,
        ),
    )
    ssl_certfile: str | None = field(
        default=None,
        metadata=_meta(
            java=None,
            aliases=("ssl.certificate.location",),
            doc="PEM file with the client certificate, for mutual TLS.",
            check=_optional_path,
        ),
    )
    ssl_keyfile: str | None = field(
        default=None,
        metadata=_meta(
            java=None,
            aliases=("ssl.key.location",),
            doc="PEM file with the client's private key, if not in ssl_certfile.",
            check=_optional_path,
        ),
    )
    ssl_password: str | None = field(
        default=None,
        repr=False,
        metadata=_meta(
            java="ssl.key.password",
            doc="Password of the private key (ssl_keyfile's, or a PEM key store's).",
            check=_optional_str,
        ),
    )
    # Java key and trust stores: the Java client's way to give the same TLS material.
    ssl_truststore_location: str | None = field(
        default=None,
        metadata=_meta(
            java="ssl.truststore.location",
            doc="A PKCS12 or PEM file of the CAs to trust, as the Java client takes it; "
            "instead of ssl_cafile. A JKS store must be converted to PKCS12 first.",
            check=_optional_path,
        ),
    )
    ssl_truststore_password: str | None = field(
        default=None,
        repr=False,
        metadata=_meta(
            java="ssl.truststore.password",
            doc="Password of a PKCS12 ssl_truststore_location (none for PEM).",
            check=_optional_str,
        ),
    )
    ssl_truststore_type: str | None = field(
        default=None,
        metadata=_meta(
            java="ssl.truststore.type",
            doc="PKCS12, PEM or JKS; None reads the type from the file (the Java client's JKS "
            "default reads PKCS12 files too). JKS files are refused with the command that "
            "converts them.",
            check=_store_type,
        ),
    )
    ssl_truststore_certificates: str | None = field(
        default=None,
        metadata=_meta(
            java="ssl.truststore.certificates",
            doc="The CAs to trust as PEM text, instead of a file.",
            check=_non_empty_optional_str,
        ),
    )
    ssl_keystore_location: str | None = field(
        default=None,
        metadata=_meta(
            java="ssl.keystore.location",
            doc="A PKCS12 or PEM file with the client's private key and certificate chain, "
            "for mutual TLS, as the Java client takes it; instead of ssl_certfile.",
            check=_optional_path,
        ),
    )
    ssl_keystore_password: str | None = field(
        default=None,
        repr=False,
        metadata=_meta(
            java="ssl.keystore.password",
            doc="Password of a PKCS12 ssl_keystore_location (a PEM key's password is "
            "ssl_password).",
            check=_optional_str,
        ),
    )
    ssl_keystore_type: str | None = field(
        default=None,
        metadata=_meta(
            java="ssl.keystore.type",
            doc="PKCS12, PEM or JKS; None reads the type from the file, as for "
            "ssl_truststore_type.",
            check=_store_type,
        ),
    )
    ssl_keystore_certificate_chain: str | None = field(
        default=None,
        metadata=_meta(
            java="ssl.keystore.certificate.chain",
            doc="The client's certificate chain as PEM text, with ssl_keystore_key.",
            check=_non_empty_optional_str,
        ),
    )
    ssl_keystore_key: str | None = field(
        default=None,
        repr=False,
        metadata=_meta(
            java="ssl.keystore.key",
            doc="The client's private key as PEM text (encrypted with ssl_password, or not), "
            "with ssl_keystore_certificate_chain.",
            check=_non_empty_optional_str,
        ),
    )
    ssl_check_hostname: bool = field(
        default=True,
        metadata=_meta(
            java="ssl.endpoint.identification.algorithm",
            java_value=_endpoint_identification,
            doc="Check the broker's certificate matches its host name. By the Java name, "
            "'https' is True and '' is False. Turning it off is logged as a warning, once.",
            check=_boolean,
        ),
    )
    sasl_mechanism: str = field(
        default="PLAIN",
        metadata=_meta(
            java="sasl.mechanism",
            doc="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or GSSAPI (Kerberos; "
            "needs the kerberos extra).",
            check=_sasl_mechanism,
        ),
    )
    sasl_plain_username: str | None = field(
        default=None,
        metadata=_meta(
            java=None,
            aliases=("sasl.username",),
            doc="User name for PLAIN and SCRAM.",
            check=_optional_str,
        ),
    )
    sasl_plain_password: str | None = field(
        default=None,
        repr=False,
        metadata=_meta(
            java=None,
            aliases=("sasl.password",),
            doc="Password for PLAIN and SCRAM.",
            check=_optional_str,
        ),
    )
    sasl_oauth_token_provider: Any = field(
        default=None,
        metadata=_meta(
            java=None,
            doc="For OAUTHBEARER: an object whose token() returns (or awaits) the bearer "
            "token, or such a callable itself.",
            check=_token_provider,
        ),
    )
    sasl_kerberos_service_name: str | None = field(
        default=None,
        metadata=_meta(
            java="sasl.kerberos.service.name",
            doc="For GSSAPI: the primary of the brokers' Kerberos principal (their "
            "sasl.kerberos.service.name); the service principal is <this>/<broker host>. "
            "None: the JAAS line's serviceName, else 'kafka'.",
            check=_non_empty_optional_str,
        ),
    )
    sasl_kerberos_principal: str | None = field(
        default=None,
        metadata=_meta(
            java=None,
            aliases=("sasl.kerberos.principal",),
            doc="For GSSAPI: the client's principal (alice@EXAMPLE.COM); needed with "
            "sasl_kerberos_keytab. Without a keytab: the ticket cache's default principal.",
            check=_non_empty_optional_str,
        ),
    )
    sasl_kerberos_keytab: str | None = field(
        default=None,
        metadata=_meta(
            java=None,
            aliases=("sasl.kerberos.keytab",),
            doc="For GSSAPI: a keytab holding sasl_kerberos_principal's key; tickets are "
            "got from it, and got again when they expire. Without it, a ticket cache.",
            check=_non_empty_optional_str,
        ),
    )
    sasl_kerberos_ccache: str | None = field(
        default=None,
        metadata=_meta(
            java=None,
            doc="For GSSAPI without a keytab: the ticket cache (FILE:/tmp/krb5cc_1000, say) "
            "that kinit fills; by default the one KRB5CCNAME names.",
            check=_non_empty_optional_str,
        ),
    )
    sasl_kerberos_domain_name: str | None = field(
        default=None,
        metadata=_meta(
            java=None,
            doc="For GSSAPI: the host name of the brokers' service principal, when it is not "
            "the host name each broker is reached by.",
            check=_non_empty_optional_str,
        ),
    )
    sasl_kerberos_kinit_cmd: str = field(
        default="kinit",
        metadata=_meta(
            java="sasl.kerberos.kinit.cmd",
            doc="For GSSAPI with a ticket cache: the program run as 'kinit -R -c <cache>' to "
            "renew the cache's ticket before it expires (a bare name is looked up on PATH).",
            check=_non_empty_string,
        ),
    )
    sasl_kerberos_ticket_renew_window_factor: float = field(
        default=0.8,
        metadata=_meta(
            java="sasl.kerberos.ticket.renew.window.factor",
            doc="For GSSAPI with a ticket cache: the ticket is renewed once this fraction of "
            "its lifetime has passed.",
            check=_fraction(low_open=True),
        ),
    )
    sasl_kerberos_ticket_renew_jitter: float = field(
        default=0.05,
        metadata=_meta(
            java="sasl.kerberos.ticket.renew.jitter",
            doc="For GSSAPI with a ticket cache: up to this fraction of the lifetime is added "
            "to the wait at random, so that processes sharing a cache do not renew together.",
            check=_fraction(high_open=True),
        ),
    )
    sasl_kerberos_min_time_before_relogin: int = field(
        default=60000,
        metadata=_meta(
            java="sasl.kerberos.min.time.before.relogin",
            doc="For GSSAPI with a ticket cache: the shortest wait between two renewal "
            "attempts, in milliseconds.",
            check=_int_between(0),
        ),
    )
    # Java SASL settings, turned into the sasl_* options above (aioproducer/jaas.py)
    sasl_jaas_config: str | None = field(
        default=None,
        repr=False,
        metadata=_meta(
            java="sasl.jaas.config",
            doc="The Java client's JAAS line: PlainLoginModule or ScramLoginModule with "
            "username and password, OAuthBearerLoginModule (clientId, clientSecret, scope "
            "with the token endpoint; unsecuredLogin* options for unsecured tokens), or "
            "Krb5LoginModule (useKeyTab, keyTab, principal, useTicketCache, ticketCache, "
            "serviceName). Sets sasl_plain_username/password, sasl_oauth_token_provider or "
            "the sasl_kerberos_* options.",
            check=_optional_str,
        ),
    )
    sasl_oauthbearer_token_endpoint_url: str | None = field(
        default=None,
        metadata=_meta(
            java="sasl.oauthbearer.token.endpoint.url",
            doc="OAuth token endpoint for OAUTHBEARER's client credentials grant (KIP-768); "
            "the client id and secret come from sasl_jaas_config.",
            check=_non_empty_optional_str,
        ),
    )
    sasl_login_callback_handler_class: str | None = field(
        default=None,
        metadata=_meta(
            java="sasl.login.callback.handler.class",
            doc="Accepted for Java configurations when it names Kafka's own OAUTHBEARER login "
            "handler (token endpoint or unsecured); other classes are refused.",
            check=_non_empty_optional_str,
        ),
    )
    sasl_login_connect_timeout_ms: int | None = field(
        default=None,
        metadata=_meta(
            java="sasl.login.connect.timeout.ms",
            doc="How long connecting to the OAuth token endpoint may take; None is 10 s.",
            check=_optional_timeout,
        ),
    )
    sasl_login_read_timeout_ms: int | None = field(
        default=None,
        metadata=_meta(
            java="sasl.login.read.timeout.ms",
            doc="How long each read from the OAuth token endpoint may wait; None is 30 s.",
            check=_optional_timeout,
        ),
    )
    sasl_oauthbearer_sub_claim_name: str = field(
        default="sub",
        metadata=_meta(
            java="sasl.oauthbearer.sub.claim.name",
            doc="The claim of a token from the endpoint that names the principal; a token "
            "without it is refused.",
            check=_string,
        ),
    )
    sasl_oauthbearer_scope_claim_name: str = field(
        default="scope",
        metadata=_meta(
            java="sasl.oauthbearer.scope.claim.name",
            doc="The claim of a token from the endpoint that holds its scopes (logged).",
            check=_string,
        ),
    )
    sasl_oauthbearer_header_urlencode: bool = field(
        default=False,
        metadata=_meta(
            java="sasl.oauthbearer.header.urlencode",
            doc="URL-encode the client id and secret in the token request's Authorization "
            "header (RFC 6749 section 2.3.1).",
            check=_boolean,
        ),
    )
    # misc
    metrics_sample_window_ms: int = field(
        default=30000,
        metadata=_meta(
            java="metrics.sample.window.ms",
            doc="The window over which rates in metrics() are computed.",
            check=_int_between(0, _LONG_MAX),
        ),
    )
    send_buffer_bytes: int = field(
        default=131072,
        metadata=_meta(
            java="send.buffer.bytes",
            doc="SO_SNDBUF of broker connections; -1 keeps the OS default.",
            check=_int_between(-1),
        ),
    )
    receive_buffer_bytes: int = field(
        default=32768,
        metadata=_meta(
            java="receive.buffer.bytes",
            doc="SO_RCVBUF of broker connections; -1 keeps the OS default.",
            check=_int_between(-1),
        ),
    )
    socket_writer_thread: bool = field(
        default=True,
        metadata=_meta(
            java=None,
            aliases=("socket.writer.thread",),
            doc="Write requests to unencrypted broker connections (PLAINTEXT, SASL_PLAINTEXT) "
            "on a native thread, off the event loop (Linux, compiled install). The event loop "
            "only copies each request's bytes; the system call, which on loopback also runs "
            "the broker's side of TCP, runs on another core. False, TLS connections (SSL, "
            "SASL_SSL) and other platforms write through the event loop's transport.",
            check=_boolean,
        ),
    )
    client_software_name: str = field(
        default="aioproducer",
        metadata=_meta(
            java=None,
            doc="Client name reported to brokers in ApiVersions (KIP-511).",
            check=_software,
        ),
    )
    client_software_version: str = field(
        default=_package_version(),
        metadata=_meta(
            java=None,
            doc="Client version reported to brokers in ApiVersions (KIP-511).",
            check=_software,
        ),
    )
    max_response_size: int = field(
        default=33554432,
        metadata=_meta(
            java=None,
            doc="Largest response accepted from a broker (32 MiB: Metadata for a very large "
            "cluster is far smaller); a bigger size prefix closes the connection as corrupt "
            "before anything is read. Responses of a fixed shape (ApiVersions, "
            "InitProducerId, SASL, FindCoordinator, EndTxn) are capped at 1 MiB, Produce "
            "and transactional ones in proportion to their request.",
            check=_int_between(1),
        ),
    )

    def __post_init__(self) -> None:
        for spec in _FIELDS:
            value = getattr(self, spec.name)
            checked = spec.metadata["check"](spec.name, value)
            if checked is not value:
                object.__setattr__(self, spec.name, checked)
        apply_java_sasl(self, _label)
        self._check_combinations()

    def _check_combinations(self) -> None:
        if self.enable_idempotence:
            problems = _idempotence_conflicts(
                self.acks, self.retries, self.max_in_flight_requests_per_connection
            )
            if problems:
                raise ConfigurationError(
                    "enable_idempotence (enable.idempotence) is True, so " + "; ".join(problems)
                )
        if self.transactional_id is not None and not self.enable_idempotence:
            raise ConfigurationError(
                "transactional_id (transactional.id) is set, which needs enable_idempotence=True"
            )
        floor = min(self.linger_ms + self.request_timeout_ms, _INT_MAX)
        if self.delivery_timeout_ms < floor:
            raise ConfigurationError(
                f"delivery_timeout_ms (delivery.timeout.ms) must be at least linger_ms + "
                f"request_timeout_ms = {floor}, got {self.delivery_timeout_ms}"
            )
        codec = self.compression_type
        level = self.compression_level
        if level is not None:
            bounds = _LEVEL_RANGES.get(codec)
            if bounds is None:
                raise ConfigurationError(
                    f"compression_level is {level}, but compression_type {codec!r} has no levels"
                )
            low, high = bounds
            if not (low <= level <= high or (codec == "gzip" and level == -1)):
                raise ConfigurationError(
                    f"compression_level for {codec} must be from {low} to {high}"
                    + (" or -1" if codec == "gzip" else "")
                    + f", got {level}"
                )
        self._check_security()

    def _check_security(self) -> None:
        protocol = self.security_protocol
        if not protocol.endswith("SSL"):
            for name in ("ssl_context", *_SSL_FILE_FIELDS):
                if getattr(self, name) is not None:
                    raise ConfigurationError(
                        f"{_label(name)} is set but security_protocol is {protocol!r}; "
                        "use 'SSL' or 'SASL_SSL' to connect with TLS"
                    )
        else:
            if self.ssl_context is not None:
                for name in _SSL_FILE_FIELDS:
                    if getattr(self, name) is not None:
                        raise ConfigurationError(
                            f"give either ssl_context or {_label(name)}, not both: the context "
                            "is used as it is"
                        )
            if self.ssl_certfile is None:
                if self.ssl_keyfile is not None:
                    raise ConfigurationError("ssl_keyfile is set but ssl_certfile is not")
                if self.ssl_password is not None and not (
                    self.ssl_keystore_location or self.ssl_keystore_key
                ):
                    raise ConfigurationError(
                        "ssl_password (ssl.key.password) is set but there is no private key: "
                        "no ssl_certfile, ssl_keystore_location or ssl_keystore_key"
                    )
            check_stores(self, _label)
        sasl_fields = (
            "sasl_plain_username",
            "sasl_plain_password",
            "sasl_oauth_token_provider",
            "sasl_kerberos_service_name",
            "sasl_kerberos_principal",
            "sasl_kerberos_keytab",
            "sasl_kerberos_ccache",
            "sasl_kerberos_domain_name",
        )
        if not protocol.startswith("SASL"):
            if self.sasl_mechanism != "PLAIN":
                raise ConfigurationError(
                    f"sasl_mechanism is {self.sasl_mechanism!r} but security_protocol is "
                    f"{protocol!r}; use 'SASL_PLAINTEXT' or 'SASL_SSL' to authenticate with SASL"
                )
            for name in sasl_fields:
                if getattr(self, name) is not None:
                    raise ConfigurationError(
                        f"{name} is set but security_protocol is {protocol!r}; "
                        "use 'SASL_PLAINTEXT' or 'SASL_SSL' to authenticate with SASL"
                    )
            return
        if self.sasl_mechanism == "GSSAPI":
            self._check_kerberos()
        else:
            kerberos = [
                name
                for name in (
                    "sasl_kerberos_principal",
                    "sasl_kerberos_keytab",
                    "sasl_kerberos_ccache",
                )
                if getattr(self, name) is not None
            ]
            if kerberos:
                raise ConfigurationError(
                    f"{', '.join(kerberos)} set but sasl_mechanism is "
                    f"{self.sasl_mechanism!r}: Kerberos credentials are used with "
                    "sasl_mechanism 'GSSAPI' only"
                )
            if self.sasl_mechanism == "OAUTHBEARER":
                if self.sasl_oauth_token_provider is None:
                    raise ConfigurationError(
                        "sasl_mechanism 'OAUTHBEARER' needs sasl_oauth_token_provider"
                    )
            elif self.sasl_plain_username is None or self.sasl_plain_password is None:
                raise ConfigurationError(
                    f"sasl_mechanism {self.sasl_mechanism!r} needs sasl_plain_username and "
                    "sasl_plain_password"
                )

    def _check_kerberos(self) -> None:
        """GSSAPI: a keytab needs its principal and must be readable; the gssapi package
        must be installed (say so now, not at the first connection)."""
        keytab = self.sasl_kerberos_keytab
        if keytab is not None:
            if self.sasl_kerberos_principal is None:
                raise ConfigurationError(
                    "sasl_kerberos_keytab is set but sasl_kerberos_principal is not: name the "
                    "principal whose key the keytab holds (alice@EXAMPLE.COM)"
                )
            if not os.path.isfile(keytab) or not os.access(keytab, os.R_OK):
                raise ConfigurationError(
                    f"sasl_kerberos_keytab {keytab!r} is not a readable file"
                )
            if self.sasl_kerberos_ccache is not None:
                raise ConfigurationError(
                    "give sasl_kerberos_keytab or sasl_kerberos_ccache, not both: with a "
                    "keytab, tickets are kept in memory"
                )
        try:
            import gssapi  # noqa: F401
        except ImportError:
            raise ConfigurationError(
                "sasl_mechanism GSSAPI needs Kerberos: install the gssapi package (pip install "
                "'aioproducer[kerberos]'), which builds against the MIT Kerberos libraries "
                "(Debian: libkrb5-dev; Red Hat: krb5-devel)"
            ) from None

    @classmethod
    def from_options(
        cls, config: Mapping[str, Any] | None = None, **options: Any
    ) -> ProducerConfig:
        """Build a validated configuration from a mapping and keyword options.

        Args:
            config: options by snake_case name (``"linger_ms"``) or Java name
                (``"linger.ms"``, plus a few librdkafka names such as ``"sasl.username"``).
            **options: options by snake_case name; they win over ``config``.

        Raises:
            ConfigurationError: an unknown name, a name given twice in ``config``, an invalid
                value, or options that contradict each other.
        """
        values: dict[str, Any] = {}
        if config is not None:
            if not isinstance(config, Mapping):
                raise ConfigurationError(
                    f"config must be a mapping of option names to values, not "
                    f"{type(config).__name__}"
                )
            config = without_java_only(config, _is_own_name)
            written: dict[str, str] = {}
            for key, value in config.items():
                name = option_field_name(key)
                if name in values:
                    raise ConfigurationError(
                        f"{_label(name)} is given twice in config: as {written[name]!r} and "
                        f"as {key!r}"
                    )
                java_value = _SPECS[name].metadata["java_value"]
                if java_value is not None and key == _JAVA_NAME.get(name):
                    value = java_value(name, value)
                values[name] = value
                written[name] = key
        for key, value in options.items():
            values[option_field_name(key)] = value
        for name, value in values.items():
            values[name] = _SPECS[name].metadata["check"](name, value)
        _resolve(values)
        return cls(**values)

    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        """The bootstrap servers as ``(host, port)`` pairs, in the order given.

        IPv6 hosts come without brackets (``("::1", 9092)``); a missing port is 9092.
        """
        return [_parse_address(server) for server in self.bootstrap_servers]

    def __repr__(self) -> str:
        parts = []
        for spec in _FIELDS:
            value = getattr(self, spec.name)
            if spec.name in _SECRET_FIELDS and value is not None:
                parts.append(f"{spec.name}={_SECRET!r}")
            else:
                parts.append(f"{spec.name}={value!r}")
        return f"ProducerConfig({', '.join(parts)})"


_FIELDS: Final[tuple[Field[Any], ...]] = fields(ProducerConfig)
_SPECS: Final[Mapping[str, Field[Any]]] = {spec.name: spec for spec in _FIELDS}
_ALIASES: Final[Mapping[str, str]] = {
    alias: spec.name
    for spec in _FIELDS
    for alias in (spec.metadata["java"], *spec.metadata["aliases"])
    if alias
}
_JAVA_NAME.update({spec.name: spec.metadata["java"] for spec in _FIELDS if spec.metadata["java"]})


def _is_own_name(key: str) -> bool:
    return key in _SPECS or key in _ALIASES


def option_field_name(key: Any) -> str:
    """The :class:`ProducerConfig` field an option name means: the field's own name, a Java
    name (``linger.ms``) or another accepted spelling.

    Raises:
        ConfigurationError: not a string, another client's name (the message says which
            option to use), or unknown (with the closest names).
    """
    if not isinstance(key, str):
        raise ConfigurationError(f"option names must be strings, got {key!r}")
    if key in _SPECS:
        return key
    name = _ALIASES.get(key)
    if name is not None:
        return name
    foreign = FOREIGN_NAMES.get(key)
    if foreign is not None:
        raise ConfigurationError(
            f"unknown option {key!r} (another client's name); use {foreign} instead"
        )
    known = list(_SPECS) + list(_ALIASES)
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigurationError(f"unknown option {key!r}{hint}")


def _idempotence_conflicts(acks: int, retries: int, max_in_flight: int) -> list[str]:
    problems = []
    if acks != -1:
        problems.append(f"acks must be 'all' (got {acks})")
    if retries == 0:
        problems.append("retries must be greater than 0")
    if max_in_flight > _MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
        problems.append(
            f"max_in_flight_requests_per_connection must be at most "
            f"{_MAX_IN_FLIGHT_FOR_IDEMPOTENCE} (got {max_in_flight})"
        )
    return problems


def _default(name: str) -> Any:
    spec = _SPECS[name]
    return spec.default


def _resolve(values: dict[str, Any]) -> None:
    """Settle options the user left at their defaults the way the Java producer does.

    ``values`` holds only the options the user gave, already checked one by one; this adds
    the defaults that must change because of them.
    """

    def get(name: str) -> Any:
        return values[name] if name in values else _default(name)

    if "enable_idempotence" not in values and get("enable_idempotence"):
        problems = _idempotence_conflicts(
            get("acks"), get("retries"), get("max_in_flight_requests_per_connection")
        )
        if problems:
            if get("transactional_id") is not None:
                raise ConfigurationError(
                    "transactional_id (transactional.id) needs idempotence, which is off because "
                    + "; ".join(problems)
                )
            log.info(
                "idempotence is disabled because %s; set enable_idempotence to choose",
                "; ".join(problems),
            )
            values["enable_idempotence"] = False
    if "delivery_timeout_ms" not in values:
        floor = min(get("linger_ms") + get("request_timeout_ms"), _INT_MAX)
        if get("delivery_timeout_ms") < floor:
            log.warning(
                "delivery_timeout_ms is raised to linger_ms + request_timeout_ms = %d", floor
            )
            values["delivery_timeout_ms"] = floor
    for base, ceiling in (
        ("retry_backoff_ms", "retry_backoff_max_ms"),
        ("reconnect_backoff_ms", "reconnect_backoff_max_ms"),
        ("socket_connection_setup_timeout_ms", "socket_connection_setup_timeout_max_ms"),
    ):
        if get(base) > get(ceiling):
            log.warning(
                "%s (%d) is greater than %s (%d): a fixed %d ms is used, without exponential "
                "growth",
                base,
                get(base),
                ceiling,
                get(ceiling),
                get(ceiling),
            )


class OptionInfo(NamedTuple):
    """One row of the configuration table in the docs."""

    name: str
    """The field name and keyword option (``linger_ms``)."""
    java_name: str | None
    """The Java client's name for it (``linger.ms``), or None when Java has no such option."""
    default: Any
    """The default, as the docs show it."""
    doc: str
    """What the option means, in one line."""


def _shown_default(spec: Field[Any]) -> Any:
    shown = spec.metadata["shown_default"]
    return spec.default if shown is MISSING else shown


def options_table() -> list[OptionInfo]:
    """Every option in declaration order: name, Java name, default and a one-line meaning.

    The docs render this as the configuration reference.
    """
    return [
        OptionInfo(
            spec.name,
            spec.metadata["java"],
            _shown_default(spec),
            spec.metadata["doc"],
        )
        for spec in _FIELDS
    ]
