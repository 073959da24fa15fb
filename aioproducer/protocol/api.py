"""API keys, the request and response base classes, and header-version rules.

A :class:`Request` is built version-neutral; the connection picks a version with the broker
(ApiVersions) and calls :meth:`Request.encode` for that version. The matching response is
decoded by the same request object, which knows the version it was sent with and anything
else a response needs to be read back in a version-neutral shape.
"""

from __future__ import annotations

import abc
from enum import IntEnum
from typing import Any, ClassVar, Generic, TypeVar

from aioproducer.errors import UnsupportedVersionError

__all__ = [
    "CLIENT_THROTTLES_FROM",
    "FIRST_FLEXIBLE_VERSION",
    "NEVER_FLEXIBLE",
    "SMALL_RESPONSE_LIMIT",
    "ApiKey",
    "Request",
    "Response",
    "response_header_flexible",
]


class ApiKey(IntEnum):
    """The Kafka API keys this client speaks."""

    PRODUCE = 0
    METADATA = 3
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


#: The Kafka release that first offered an API, for the APIs this client uses that brokers
#: still in service may lack (older ones are in every broker it can speak to): named when a
#: broker does not support one.
ADDED_IN: dict[int, str] = {
    ApiKey.DESCRIBE_CLUSTER: "2.8 (KIP-700)",
    ApiKey.DESCRIBE_TRANSACTIONS: "3.0 (KIP-664)",
    ApiKey.LIST_TRANSACTIONS: "3.0 (KIP-664)",
}

NEVER_FLEXIBLE = 1 << 15
"""A first-flexible version no real version reaches: the API has no flexible versions."""

FIRST_FLEXIBLE_VERSION: dict[int, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.SASL_HANDSHAKE: NEVER_FLEXIBLE,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
}
"""The first version of each API that uses flexible encoding ("flexibleVersions" in the schemas)."""


CLIENT_THROTTLES_FROM: dict[int, int] = {
    ApiKey.PRODUCE: 6,
    ApiKey.METADATA: 6,
    ApiKey.OFFSET_FETCH: 4,
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3,
    ApiKey.DELETE_TOPICS: 2,
    ApiKey.INIT_PRODUCER_ID: 1,
    ApiKey.ADD_PARTITIONS_TO_TXN: 1,
    ApiKey.ADD_OFFSETS_TO_TXN: 1,
    ApiKey.END_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1,
    ApiKey.DESCRIBE_CONFIGS: 2,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
}
"""KIP-219: from which version of each API a broker over a quota answers at once and
expects the client to send it nothing for ``throttle_time_ms`` (the schemas: "on quota
violation, brokers send out responses before throttling"; Java's
``AbstractResponse.shouldClientThrottle``). Below it, and for the SASL APIs, the broker
delays the answer itself."""

SMALL_RESPONSE_LIMIT = 1 << 20
"""The size cap of a response whose size does not grow with the cluster or the request
(ApiVersions, InitProducerId, SASL, FindCoordinator, EndTxn, ...): 1 MiB, thousands of times
what a broker sends, and a floor for the caps that do grow with the request."""


def response_header_flexible(api_key: int, version: int) -> bool:
    """True when the response to ``api_key`` at ``version`` has a v1 (flexible) header.

    ApiVersions responses always use header v0, whatever the version: a client that does not
    know the broker's versions yet must be able to read the header.
    """
    if api_key == ApiKey.API_VERSIONS:
        return False
    try:
        return version >= FIRST_FLEXIBLE_VERSION[api_key]
    except KeyError:
        raise UnsupportedVersionError(f"unknown API key {api_key}") from None


class Response:
    """The base of every decoded response (a slotted dataclass per API)."""

    __slots__ = ()


ResponseT = TypeVar("ResponseT", bound=Response, covariant=True)


class Request(abc.ABC, Generic[ResponseT]):
    """The base of every request: version-neutral fields, encoded for a negotiated version.

    Attributes:
        API_KEY: the Kafka API key.
        MIN_VERSION: the lowest version this client implements.
        MAX_VERSION: the highest version this client negotiates.
        FLEXIBLE_FROM: the first flexible version (request header v2, compact encodings,
            tagged fields); :data:`NEVER_FLEXIBLE` when there is none. A subclass that sets
            ``API_KEY`` takes it from :data:`FIRST_FLEXIBLE_VERSION`.
        RESPONSE_SIZE_LIMIT: what :meth:`response_size_limit` returns unless a request
            overrides it: :data:`SMALL_RESPONSE_LIMIT` for APIs whose responses have a fixed
            shape, None (no cap of its own) by default.
    """

    __slots__ = ()

    API_KEY: ClassVar[int]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FLEXIBLE_FROM: ClassVar[int]
    RESPONSE_SIZE_LIMIT: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The first flexible version comes from the one table, FIRST_FLEXIBLE_VERSION.
        if "API_KEY" in cls.__dict__ and "FLEXIBLE_FROM" not in cls.__dict__:
            cls.FLEXIBLE_FROM = FIRST_FLEXIBLE_VERSION[cls.API_KEY]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        """True when ``version`` uses the flexible encoding."""
        return version >= cls.FLEXIBLE_FROM

    @classmethod
    def check_version(cls, version: int) -> None:
        """Raise :class:`~aioproducer.errors.UnsupportedVersionError` unless implemented."""
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise UnsupportedVersionError(
                f"{cls.__name__} v{version} is not implemented "
                f"(v{cls.MIN_VERSION}-v{cls.MAX_VERSION} are)"
            )

    def highest_version(self) -> int:
        """The highest version this request may be sent with: :attr:`MAX_VERSION`, unless the
        request carries a lower ``version_cap`` (as the Java client's request builders cap
        Produce, EndTxn and TxnOffsetCommit below their KIP-890 versions for transactions v1).
        """
        return self.MAX_VERSION

    @abc.abstractmethod
    def encode(self, version: int) -> list[bytes | memoryview]:
        """The request body (no size prefix, no header) for ``version``, as buffers to write."""

    def expects_response(self) -> bool:
        """False when the broker sends no response (Produce with ``acks=0``)."""
        return True

    def response_size_limit(self) -> int | None:
        """The largest response frame (in bytes, after its size prefix) a broker can
        legitimately send for this request, or None when only the connection's
        ``max_response_size`` bounds it (Metadata: it grows with the cluster).

        A connection refuses a larger size prefix before reading the frame: a hostile broker
        cannot make it buffer, and then decode into objects, more than the request can
        explain. :attr:`RESPONSE_SIZE_LIMIT` unless overridden.
        """
        return self.RESPONSE_SIZE_LIMIT

    @abc.abstractmethod
    def decode_response(self, data: memoryview, version: int) -> ResponseT:
        """Decode the response body (after the response header) sent for ``version``."""
