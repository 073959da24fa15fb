"""Creating, describing and deleting topics over a producer's own connections.

``producer.admin`` is a :class:`TopicAdmin`: what a service needs to make sure its topics
exist when the cluster does not create them on first use (``auto.create.topics.enable`` is
off in most production clusters)::

    async with Producer(bootstrap_servers="localhost:9092") as producer:
        await producer.admin.ensure_topics(
            [NewTopic("orders", num_partitions=6, replication_factor=3)]
        )
        await producer.send_and_wait("orders", b"first order")

The requests travel on the connections the producer already has, negotiated with each
broker like every other request. As in Java's ``Admin`` client, CreateTopics and
DeleteTopics go to the broker the Metadata answer names as the controller (in KRaft mode
any broker forwards them to the active controller, and names one of the brokers), and to
the least loaded broker when none is named; a broker that answers ``NOT_CONTROLLER`` makes
the call look the controller up again and try once more. A named controller that cannot be
connected to is looked up again too, and if it is named again, passed over for the least
loaded broker (which forwards, in KRaft mode). Metadata (for describing) and
DescribeConfigs go to the least loaded broker.

Every call has a deadline, ``timeout`` seconds (``max_block_ms`` by default): lost
connections, requests that time out, ``NOT_CONTROLLER`` and throttled creations
(``THROTTLING_QUOTA_EXCEEDED``) are tried again, with the producer's retry backoff, until
it passes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from aioproducer._core.backoff import ExponentialBackoff
from aioproducer._core.futures import error_copy
from aioproducer._core.metadata import validate_topic
from aioproducer.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaConnectionError,
    KafkaError,
    ProducerClosedError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownServerError,
    error_for_code,
)
from aioproducer.protocol.api import Request, Response
from aioproducer.protocol.error_codes import ErrorCode
from aioproducer.protocol.messages import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicResult,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseTopic,
)

if TYPE_CHECKING:
    from aioproducer._core.metadata import Metadata
    from aioproducer.config import ProducerConfig
    from aioproducer.net.connection import BrokerConnection
    from aioproducer.net.manager import ConnectionManager

__all__ = [
    "NewTopic",
    "PartitionDescription",
    "TopicAdmin",
    "TopicCreation",
    "TopicDescription",
]

log = logging.getLogger("aioproducer.admin")

_R = TypeVar("_R", bound=Response)

# Kafka's limits: a partition count is an int32, a replication factor an int16.
_MAX_PARTITIONS: Final = (1 << 31) - 1
_MAX_REPLICATION_FACTOR: Final = (1 << 15) - 1
# DescribeConfigs' resource type of a topic (Java's ConfigResource.Type.TOPIC).
_TOPIC_RESOURCE: Final = 2
# How often a call looks again for a connection that can take its request, at first and at
# most (the producer's connection manager wakes only the sender when one becomes ready).
_FIRST_POLL: Final = 0.005
_MAX_POLL: Final = 0.1
# How soon ensure_topics asks again for a topic the controller says exists but a broker
# does not know yet (Kafka's brokers apply the controller's metadata within milliseconds).
_DESCRIBE_AGAIN: Final = 0.02


# ---- the public values ---------------------------------------------------------------------


def _config_value(topic: str, name: object, value: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidConfigError(
            f"topic {topic!r}: a config name must be a non-empty str, not {name!r}"
        )
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    raise InvalidConfigError(
        f"topic {topic!r}: config {name!r} must be a str (or an int or bool, written as "
        f"Kafka reads them), not {type(value).__name__}"
    )


def _count(value: object, what: str, highest: int, error: type[KafkaError]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{what} must be an int or None, not {type(value).__name__}")
    if not 1 <= value <= highest:
        raise error(
            f"{what} must be from 1 to {highest}, or None for the broker's default; got {value}"
        )
    return value


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create: its name, partitions, replication factor and configs.

    Checked when built, as the broker would check it, so a mistake is reported before
    anything is sent.

    Args:
        name: a legal topic name (ASCII letters, digits, ``.``, ``_`` and ``-``; at most
            249 characters).
        num_partitions: at least 1; None for the broker's ``num.partitions``.
        replication_factor: at least 1, at most the number of brokers; None for the
            broker's ``default.replication.factor``.
        configs: topic configs by Kafka's names (``{"cleanup.policy": "compact"}``); an int
            or bool value is written as Kafka reads it (``86400000``, ``true``).
        replica_assignment: ``{partition: [broker ids]}`` for partitions 0 to N-1, to place
            each partition by hand (its first broker is the preferred leader); then leave
            ``num_partitions`` and ``replication_factor`` None.

    Raises:
        InvalidTopicError: an illegal name.
        InvalidPartitionsError: a partition count below 1 (or not an int).
        InvalidReplicationFactorError: a replication factor below 1 (or not an int).
        InvalidConfigError: a config name or value of the wrong type.
        InvalidReplicaAssignmentError: an assignment that skips a partition, names a
            broker twice for one partition, or comes with a partition count or
            replication factor.
    """

    name: str
    num_partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] | None = None

    def __post_init__(self) -> None:
        name = validate_topic(self.name)
        _count(self.num_partitions, "num_partitions", _MAX_PARTITIONS, InvalidPartitionsError)
        _count(
            self.replication_factor,
            "replication_factor",
            _MAX_REPLICATION_FACTOR,
            InvalidReplicationFactorError,
        )
        if not isinstance(self.configs, Mapping):
            raise InvalidConfigError(
                f"topic {name!r}: configs must be a mapping of config names to values, not "
                f"{type(self.configs).__name__}"
            )
        configs = {key: _config_value(name, key, value) for key, value in self.configs.items()}
        object.__setattr__(self, "configs", MappingProxyType(configs))
        assignment = self.replica_assignment
        if assignment is not None:
            object.__setattr__(self, "replica_assignment", _checked_assignment(self, assignment))

    def _creatable(self) -> CreatableTopic:
        """The topic as CreateTopics carries it (-1 for the broker's defaults)."""
        assignments = [
            CreatableReplicaAssignment(partition, list(brokers))
            for partition, brokers in sorted((self.replica_assignment or {}).items())
        ]
        return CreatableTopic(
            self.name,
            -1 if self.num_partitions is None else self.num_partitions,
            -1 if self.replication_factor is None else self.replication_factor,
            assignments,
            [CreatableTopicConfig(key, value) for key, value in self.configs.items()],
        )


def _checked_assignment(
    topic: NewTopic, assignment: Mapping[int, Sequence[int]]
) -> Mapping[int, tuple[int, ...]]:
    name = topic.name
    if not isinstance(assignment, Mapping) or not assignment:
        raise InvalidReplicaAssignmentError(
            f"topic {name!r}: replica_assignment must be a non-empty mapping of partitions to "
            "broker ids"
        )
    if topic.num_partitions is not None or topic.replication_factor is not None:
        raise InvalidReplicaAssignmentError(
            f"topic {name!r}: give either replica_assignment or num_partitions and "
            "replication_factor, not both (the assignment says how many of each)"
        )
    checked: dict[int, tuple[int, ...]] = {}
    for partition, brokers in assignment.items():
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise InvalidReplicaAssignmentError(
                f"topic {name!r}: partition {partition!r} of replica_assignment is not an int"
            )
        if isinstance(brokers, str | bytes) or not isinstance(brokers, Sequence):
            raise InvalidReplicaAssignmentError(
                f"topic {name!r}: partition {partition} must map to a list of broker ids"
            )
        ids = tuple(brokers)
        if not ids or any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in ids):
            raise InvalidReplicaAssignmentError(
                f"topic {name!r}: partition {partition} must map to one or more broker ids "
                f"(ints from 0), not {list(brokers)!r}"
            )
        if len(set(ids)) != len(ids):
            raise InvalidReplicaAssignmentError(
                f"topic {name!r}: partition {partition} names a broker twice: {list(ids)}"
            )
        checked[partition] = ids
    if sorted(checked) != list(range(len(checked))):
        raise InvalidReplicaAssignmentError(
            f"topic {name!r}: replica_assignment must name partitions 0 to "
            f"{len(checked) - 1} once each, not {sorted(checked)}"
        )
    return MappingProxyType(checked)


@dataclass(frozen=True, slots=True)
class TopicCreation:
    """What became of one topic a :meth:`TopicAdmin.create_topics` or
    :meth:`TopicAdmin.ensure_topics` call asked for.

    Attributes:
        name: the topic.
        created: True when this call created it. False when it failed (see ``error``),
            when the call only validated it (``validate_only``), or when
            :meth:`~TopicAdmin.ensure_topics` found it there already.
        error: why it could not be created (an :class:`~aioproducer.errors.KafkaError` of
            the broker's error code, with the broker's message), or None.
        topic_id: the topic's id (Kafka 2.8+), or None when the broker did not say (and
            with ``validate_only``).
        num_partitions: its partition count as created (or found), -1 when unknown.
        replication_factor: its replication factor as created (or found), -1 when
            unknown.
        configs: its configs as created, by name, as the broker reported them (Kafka 2.4+
            reports every config); empty when the broker did not say.
    """

    name: str
    created: bool
    error: KafkaError | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition of a described topic.

    Attributes:
        partition: its index.
        leader: the broker leading it, or None while it has no leader.
        replicas: the brokers holding a replica, the preferred leader first.
        isr: the replicas in sync with the leader.
        offline_replicas: the replicas on brokers that are offline.
        leader_epoch: the leader's epoch, -1 when unknown.
    """

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic as the cluster's metadata describes it.

    Attributes:
        name: the topic.
        topic_id: its id (Kafka 2.8+), or None when the broker did not say.
        internal: True for Kafka's own topics (``__consumer_offsets``,
            ``__transaction_state``).
        partitions: its partitions, by index.
        configs: every config of the topic, by name (a sensitive one's value is None),
            when asked for with ``include_configs=True``; else empty.
    """

    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionDescription, ...]
    configs: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        """How many partitions the topic has."""
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        """How many replicas its first partition has (Kafka gives every partition of a
        topic as many, unless they were placed by hand); 0 for a topic without partitions."""
        return len(self.partitions[0].replicas) if self.partitions else 0


# ---- the calls -------------------------------------------------------------------------------


class TopicBackend(Protocol):
    """Where a :class:`TopicAdmin` sends its calls: a producer's brokers
    (:func:`broker_topics`), or an :class:`~aioproducer.testing.InMemoryProducer`'s topics.

    Each method gets arguments already checked (names legal and distinct) and the call's
    deadline on :func:`time.monotonic`'s clock, and reports each topic's own outcome; it
    raises only for what fails the whole call.
    """

    async def create(
        self, topics: Sequence[NewTopic], validate_only: bool, deadline: float
    ) -> dict[str, TopicCreation]:
        """Each topic's outcome, by name."""
        ...

    async def describe(
        self, names: Sequence[str], include_configs: bool, deadline: float
    ) -> dict[str, TopicDescription | KafkaError]:
        """Each topic's description, or the error that stands in for it, by name."""
        ...

    async def delete(self, names: Sequence[str], deadline: float) -> dict[str, KafkaError | None]:
        """Each topic's error, or None when it was deleted, by name."""
        ...


def _names(names: Iterable[str], what: str) -> list[str]:
    if isinstance(names, str | bytes):
        raise InvalidArgumentTypeError(
            f"{what} takes a list of topic names, not the {type(names).__name__} {names!r} "
            f"(write [{names!r}])"
        )
    checked = [validate_topic(name) for name in names]
    _refuse_repeats(checked, what)
    return checked


def _refuse_repeats(names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidArgumentError(f"{what}: topic {name!r} is named more than once")
        seen.add(name)


def _first_failure(
    what: str, errors: Mapping[str, KafkaError | None], others: Sequence[str]
) -> KafkaError | None:
    """The error of the first topic that failed (in the order asked), its message naming
    how the call went for the others; None when none failed."""
    failed = [name for name in others if errors.get(name) is not None]
    if not failed:
        return None
    first = errors[failed[0]]
    assert first is not None
    if len(others) == 1:
        return first
    succeeded = [name for name in others if errors.get(name) is None]
    parts = []
    if len(failed) > 1:
        parts.append(f"{len(failed) - 1} other topic(s) failed too: {', '.join(failed[1:])}")
    if succeeded:
        parts.append(f"{what}: {', '.join(succeeded)}")
    return _with_note(first, "; ".join(parts))


def _with_note(error: KafkaError, note: str) -> KafkaError:
    copy = error_copy(error, fresh=True)
    copy.args = (f"{error.message} ({note})",)
    return copy


class TopicAdmin:
    """Create, describe and delete topics: ``producer.admin``.

    Obtained from a started :class:`~aioproducer.Producer` (its ``admin`` property), whose
    connections it uses, or from an :class:`~aioproducer.testing.InMemoryProducer`, whose
    in-memory topics it manages. It is a light handle: get it again whenever convenient.
    Every method must run on the producer's event loop, while the producer runs.

    Args:
        backend: where the calls go.
        timeout: the default of each call's ``timeout``, in seconds.
        check_running: raises when the producer is not running (or not on this loop).
    """

    def __init__(
        self, backend: TopicBackend, *, timeout: float, check_running: Callable[[], None]
    ) -> None:
        self._backend = backend
        self._timeout = timeout
        self._check_running = check_running

    def __repr__(self) -> str:
        return f"<TopicAdmin over {self._backend!r}>"

    def _deadline(self, timeout: float | None) -> float:
        try:
            self._check_running()
        except ProducerClosedError:
            raise ProducerClosedError("cannot administer topics: the producer is closed") from None
        seconds = self._timeout if timeout is None else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InvalidArgumentTypeError(
                f"timeout must be a number of seconds or None, not {type(seconds).__name__}"
            )
        if not seconds > 0 or math.isinf(seconds):
            raise InvalidArgumentError(
                f"timeout must be a positive number of seconds, not {seconds}"
            )
        return time.monotonic() + seconds

    async def create_topics(
        self,
        topics: Iterable[NewTopic],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
        raise_errors: bool = True,
    ) -> dict[str, TopicCreation]:
        """Create ``topics``; return each one's :class:`TopicCreation`, by name, in order.

        Args:
            topics: the topics, each a :class:`NewTopic` (their names distinct).
            validate_only: have the broker check each topic (name, partitions,
                replication factor, configs, its policies) without creating anything.
            timeout: seconds the whole call may take, retries included; by default
                ``max_block_ms``. It is also how long the controller may take to create
                them (at most ``request_timeout_ms`` per request): one that it did not
                finish in time fails with
                :class:`~aioproducer.errors.RequestTimedOutError` and may appear later.
            raise_errors: raise the first topic's error, if any topic failed; with False,
                each failure is only in its topic's ``error``.

        Raises:
            KafkaError: the first failed topic's error (with ``raise_errors``), its message
                the broker's, naming the topic and how the others fared:
                :class:`~aioproducer.errors.TopicAlreadyExistsError`,
                :class:`~aioproducer.errors.InvalidReplicationFactorError`,
                :class:`~aioproducer.errors.InvalidPartitionsError`,
                :class:`~aioproducer.errors.InvalidConfigError`,
                :class:`~aioproducer.errors.InvalidTopicError`,
                :class:`~aioproducer.errors.PolicyViolationError`,
                :class:`~aioproducer.errors.TopicAuthorizationFailedError` (or
                ``ClusterAuthorizationFailedError``), ...
            RequestTimedOutError: no answer within ``timeout``. The topics may have been
                created all the same.
            InvalidArgumentTypeError, InvalidArgumentError: ``topics`` is not a list of
                :class:`NewTopic`, or names a topic twice.
            IllegalStateError, ProducerClosedError: the producer is not running.
        """
        wanted = _new_topics(topics, "create_topics")
        deadline = self._deadline(timeout)
        if not wanted:
            return {}
        outcomes = await self._backend.create(wanted, bool(validate_only), deadline)
        results = {topic.name: outcomes[topic.name] for topic in wanted}
        if raise_errors:
            done = "validated" if validate_only else "created"
            error = _first_failure(
                done, {name: r.error for name, r in results.items()}, list(results)
            )
            if error is not None:
                raise error
        return results

    async def ensure_topics(
        self,
        topics: Iterable[NewTopic],
        *,
        timeout: float | None = None,
        require_partitions: bool = False,
    ) -> dict[str, TopicCreation]:
        """Make sure ``topics`` exist: create those that do not; a topic that exists
        already (``TOPIC_ALREADY_EXISTS``) counts as a success. For a service's start-up.

        A topic found there is described (its partitions, replication factor and id fill
        its :class:`TopicCreation`, with ``created`` False). One whose partition count
        differs from the :class:`NewTopic`'s is logged at WARNING, or refused with
        ``require_partitions``. Its configs are left as they are.

        Args:
            topics: the topics, each a :class:`NewTopic` (their names distinct).
            timeout: seconds the whole call may take; by default ``max_block_ms``.
            require_partitions: raise :class:`~aioproducer.errors.InvalidPartitionsError`
                for a topic that exists with another partition count.

        Raises:
            KafkaError: the first topic that could neither be created nor found, with
                the broker's error (see :meth:`create_topics`).
            InvalidPartitionsError: ``require_partitions`` and a topic with another
                partition count.
            RequestTimedOutError: no answer within ``timeout``.
        """
        wanted = _new_topics(topics, "ensure_topics")
        deadline = self._deadline(timeout)
        if not wanted:
            return {}
        outcomes = await self._backend.create(wanted, False, deadline)
        existing = [
            topic
            for topic in wanted
            if isinstance(outcomes[topic.name].error, TopicAlreadyExistsError)
        ]
        results = {topic.name: outcomes[topic.name] for topic in wanted}
        if existing:
            found = await self._described([topic.name for topic in existing], deadline)
            for topic in existing:
                description = found[topic.name]
                if isinstance(description, KafkaError):
                    # Exists, says the controller, yet no Metadata answer showed it within the
                    # timeout: it exists all the same, its details unknown.
                    log.debug("topic %r exists, but: %s", topic.name, description)
                    results[topic.name] = TopicCreation(topic.name, False)
                    continue
                results[topic.name] = TopicCreation(
                    topic.name,
                    False,
                    None,
                    description.topic_id,
                    description.num_partitions,
                    description.replication_factor,
                )
                _check_partitions(topic, description, require_partitions)
        error = _first_failure(
            "created or found", {name: r.error for name, r in results.items()}, list(results)
        )
        if error is not None:
            raise error
        return results

    async def _described(
        self, names: list[str], deadline: float
    ) -> dict[str, TopicDescription | KafkaError]:
        """Descriptions of topics the controller says exist. A broker learns of a topic a
        moment after the controller: one it does not know yet is asked for again, every
        few milliseconds, until the deadline."""
        found = await self._backend.describe(names, False, deadline)
        while True:
            missing = []
            for name in names:
                item = found[name]
                if isinstance(item, KafkaError) and item.retriable:
                    missing.append(name)
            if not missing or time.monotonic() + _DESCRIBE_AGAIN >= deadline:
                return found
            await asyncio.sleep(_DESCRIBE_AGAIN)
            found.update(await self._backend.describe(missing, False, deadline))

    async def describe_topics(
        self,
        names: Iterable[str],
        *,
        include_configs: bool = False,
        timeout: float | None = None,
    ) -> dict[str, TopicDescription]:
        """Describe the topics named: their partitions (leader, replicas, in-sync
        replicas), id and whether they are internal, by name, in order.

        Describing never creates a topic, whatever ``auto.create.topics.enable`` says.

        Args:
            names: topic names (distinct).
            include_configs: also read every config of each topic (DescribeConfigs).
            timeout: seconds the whole call may take; by default ``max_block_ms``.

        Raises:
            UnknownTopicOrPartitionError: a topic does not exist (the first one, its
                message naming the others).
            KafkaError: another error the broker gave for a topic
                (:class:`~aioproducer.errors.TopicAuthorizationFailedError`, ...).
            RequestTimedOutError: no answer within ``timeout``.
        """
        wanted = _names(names, "describe_topics")
        deadline = self._deadline(timeout)
        if not wanted:
            return {}
        found = await self._backend.describe(wanted, bool(include_configs), deadline)
        descriptions: dict[str, TopicDescription] = {}
        errors: dict[str, KafkaError | None] = {}
        for name in wanted:
            item = found[name]
            errors[name] = item if isinstance(item, KafkaError) else None
            if isinstance(item, TopicDescription):
                descriptions[name] = item
        error = _first_failure("described", errors, wanted)
        if error is not None:
            raise error
        return descriptions

    async def delete_topics(
        self,
        names: Iterable[str],
        *,
        timeout: float | None = None,
        raise_errors: bool = True,
    ) -> dict[str, KafkaError | None]:
        """Delete the topics named, and their records; return each one's error (None
        when deleted), by name, in order.

        Args:
            names: topic names (distinct).
            timeout: seconds the whole call may take, retries included; by default
                ``max_block_ms``. Also how long the controller may take (at most
                ``request_timeout_ms`` per request).
            raise_errors: raise the first topic's error, if any failed; with False, the
                errors are only in what is returned.

        Raises:
            UnknownTopicOrPartitionError: a topic does not exist (with ``raise_errors``).
            KafkaError: another error the broker gave for a topic
                (:class:`~aioproducer.errors.TopicDeletionDisabledError`, an authorization
                error, ...), with ``raise_errors``.
            RequestTimedOutError: no answer within ``timeout``.
        """
        wanted = _names(names, "delete_topics")
        deadline = self._deadline(timeout)
        if not wanted:
            return {}
        outcomes = await self._backend.delete(wanted, deadline)
        results = {name: outcomes[name] for name in wanted}
        if raise_errors:
            error = _first_failure("deleted", results, wanted)
            if error is not None:
                raise error
        return results


def _new_topics(topics: Iterable[NewTopic], what: str) -> list[NewTopic]:
    if isinstance(topics, NewTopic | str | bytes):
        raise InvalidArgumentTypeError(
            f"{what} takes a list of NewTopic, not a single {type(topics).__name__} "
            "(write [NewTopic(...)])"
        )
    wanted = list(topics)
    for topic in wanted:
        if not isinstance(topic, NewTopic):
            raise InvalidArgumentTypeError(
                f"{what} takes NewTopic objects, not {type(topic).__name__} {topic!r} "
                "(write NewTopic(name, num_partitions=..., replication_factor=...))"
            )
    _refuse_repeats([topic.name for topic in wanted], what)
    return wanted


def _check_partitions(topic: NewTopic, found: TopicDescription, required: bool) -> None:
    wanted = topic.num_partitions
    if wanted is None or found.num_partitions == wanted:
        return
    message = (
        f"topic {topic.name!r} exists with {found.num_partitions} partition(s), not the "
        f"{wanted} asked for"
    )
    if required:
        raise InvalidPartitionsError(message)
    log.warning("%s; it is used as it is", message)


# ---- over a producer's connections --------------------------------------------------------


def broker_topics(
    connections: ConnectionManager,
    metadata: Metadata,
    config: ProducerConfig,
    wake_sender: Callable[[], None],
) -> TopicBackend:
    """The :class:`TopicBackend` of a running producer: its connections, its cluster view
    (for the controller's id and the brokers' addresses), its options (request timeout,
    retry backoff) and its sender's wake-up (to refresh that view)."""
    return _BrokerTopics(connections, metadata, config, wake_sender)


class _NotSent(KafkaConnectionError):
    """A request could not go out: the broker it was for cannot be connected to now
    (backing off after a failed attempt), or its connection closed as it was written.
    Retriable: look the controller up again, or take another broker."""


class _BrokerTopics:
    """:class:`TopicBackend` over a producer's connections."""

    def __init__(
        self,
        connections: ConnectionManager,
        metadata: Metadata,
        config: ProducerConfig,
        wake_sender: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connections = connections
        self._metadata = metadata
        self._wake_sender = wake_sender
        self._clock = clock
        self._request_timeout = config.request_timeout_ms / 1000.0
        self._backoff = ExponentialBackoff(config.retry_backoff_ms, config.retry_backoff_max_ms)

    def __repr__(self) -> str:
        return f"the brokers of {self._connections!r}"

    # ---- the three calls ------------------------------------------------------------------

    async def create(
        self, topics: Sequence[NewTopic], validate_only: bool, deadline: float
    ) -> dict[str, TopicCreation]:
        by_name = {topic.name: topic for topic in topics}
        answers, unanswered = await self._controller_rounds(
            list(by_name),
            lambda pending: CreateTopicsRequest(
                [by_name[name]._creatable() for name in pending],
                self._broker_timeout_ms(deadline),
                validate_only,
            ),
            lambda response: (
                response.throttle_time_ms,
                [(result.name, result.error_code, result) for result in response.topics],
            ),
            "CreateTopics",
            deadline,
        )
        results: dict[str, TopicCreation] = {}
        for name, answer in answers.items():
            if isinstance(answer, KafkaError):
                results[name] = TopicCreation(name, False, answer)
            else:
                # Sent before without an answer: the controller may have created it, and
                # the retry is then answered TOPIC_ALREADY_EXISTS.
                results[name] = _creation(answer, validate_only, name in unanswered)
        self._topics_changed(results)
        return results

    async def delete(self, names: Sequence[str], deadline: float) -> dict[str, KafkaError | None]:
        answers, unanswered = await self._controller_rounds(
            list(names),
            lambda pending: DeleteTopicsRequest(list(pending), self._broker_timeout_ms(deadline)),
            lambda response: (
                response.throttle_time_ms,
                [(result.name, result.error_code, result) for result in response.responses],
            ),
            "DeleteTopics",
            deadline,
        )
        results: dict[str, KafkaError | None] = {}
        for name, answer in answers.items():
            if isinstance(answer, KafkaError):
                results[name] = answer
                continue
            code = answer.error_code
            error = None
            if code != 0:
                error = error_for_code(code, answer.error_message, where=f"topic {name!r}")
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and name in unanswered:
                    error = _with_note(
                        error,
                        "a DeleteTopics sent earlier got no answer, and may have deleted it",
                    )
            results[name] = error
        self._topics_changed({name: None for name, error in results.items() if error is None})
        return results

    async def _controller_rounds(
        self,
        names: Sequence[str],
        request_for: Callable[[list[str]], Request[_R]],
        answers_of: Callable[[_R], tuple[int, list[tuple[str | None, int, Any]]]],
        api: str,
        deadline: float,
    ) -> tuple[dict[str, Any], set[str]]:
        """Send ``request_for(pending names)`` to the controller until each of ``names`` has
        its answer: NOT_CONTROLLER looks the controller up again and retries, a quota
        throttle (KIP-599) is waited out within ``deadline``, a request that got no answer
        is sent again. ``answers_of`` gives a response's throttle time and its (name, error
        code, per-topic result) entries.

        Returns each name's per-topic result, in the order they were settled (an
        UnknownServerError for a name the answer did not mention, as Java's Admin), and the
        names sent at least once without an answer.
        """
        pending = list(names)
        results: dict[str, Any] = {}
        unanswered: set[str] = set()
        attempts = 0
        refresh = False
        # The last refusal a broker answered (NOT_CONTROLLER): named too when the call's
        # time runs out while a later attempt waits for its answer.
        refused: KafkaError | None = None
        while pending:
            what = f"{api} for {', '.join(pending)}"
            try:
                response = await self._to_controller(
                    request_for(pending), refresh, deadline, what
                )
            except _Sent as sent:
                unanswered.update(pending)
                refresh = True
                error = sent.error
                if refused is not None:
                    error = type(error)(f"{error}; the attempt before was refused: {refused}")
                attempts = await self._retry_after(error, attempts, deadline, what)
                continue
            refresh = False
            throttled = False
            throttle_time_ms, entries = answers_of(response)
            answered: set[str] = set()
            for name, code, result in entries:
                if name is None or name not in pending:
                    continue  # a topic not asked for (or answered twice): nothing to say
                answered.add(name)
                if code == ErrorCode.NOT_CONTROLLER:
                    refresh = True
                    continue
                if code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and self._time_for(
                    throttle_time_ms / 1000.0, deadline
                ):
                    throttled = True
                    continue
                pending.remove(name)
                results[name] = result
            for name in [name for name in pending if name not in answered]:
                pending.remove(name)
                results[name] = UnknownServerError(
                    f"the answer to {api} did not mention topic {name!r}"
                )
            if pending:
                if throttled:
                    attempts = await self._wait_throttle(
                        throttle_time_ms, attempts, deadline, what
                    )
                    continue
                refused = error_for_code(ErrorCode.NOT_CONTROLLER)
                attempts = await self._retry_after(refused, attempts, deadline, what)
        return results, unanswered

    async def describe(
        self, names: Sequence[str], include_configs: bool, deadline: float
    ) -> dict[str, TopicDescription | KafkaError]:
        what = f"Metadata for {', '.join(names)}"
        response: MetadataResponse = await self._retried(
            MetadataRequest(list(names), allow_auto_topic_creation=False), None, deadline, what
        )
        by_name = {topic.name: topic for topic in response.topics if topic.name is not None}
        found: dict[str, TopicDescription | KafkaError] = {}
        for name in names:
            topic = by_name.get(name)
            if topic is None:
                found[name] = UnknownServerError(
                    f"the answer to Metadata did not mention topic {name!r}"
                )
            elif topic.error_code != 0:
                found[name] = _topic_error(topic.error_code, name)
            else:
                found[name] = _description(name, topic)
        described = [name for name in names if isinstance(found[name], TopicDescription)]
        if include_configs and described:
            configs = await self._configs(described, deadline)
            for name in described:
                value = configs[name]
                description = found[name]
                assert isinstance(description, TopicDescription)
                if isinstance(value, KafkaError):
                    found[name] = value
                else:
                    found[name] = TopicDescription(
                        description.name,
                        description.topic_id,
                        description.internal,
                        description.partitions,
                        MappingProxyType(value),
                    )
        return found

    async def _configs(
        self, names: Sequence[str], deadline: float
    ) -> dict[str, dict[str, str | None] | KafkaError]:
        request = DescribeConfigsRequest(
            [DescribeConfigsResource(_TOPIC_RESOURCE, name) for name in names]
        )
        response = await self._retried(
            request, None, deadline, f"DescribeConfigs for {', '.join(names)}"
        )
        configs: dict[str, dict[str, str | None] | KafkaError] = {
            name: UnknownServerError(
                f"the answer to DescribeConfigs did not mention topic {name!r}"
            )
            for name in names
        }
        for result in response.results:
            name = result.resource_name
            if name not in configs or result.resource_type != _TOPIC_RESOURCE:
                continue
            if result.error_code != 0:
                configs[name] = error_for_code(
                    result.error_code, result.error_message, where=f"topic {name!r}"
                )
            else:
                configs[name] = {entry.name: entry.value for entry in result.configs}
        return configs

    # ---- where requests go -----------------------------------------------------------------

    def _controller(self) -> int | None:
        """The controller named by the producer's cluster view, when the connections know
        how to reach it; None for the least loaded broker."""
        cluster = self._metadata.cluster
        controller = cluster.controller_id
        return controller if controller >= 0 and controller in cluster.brokers else None

    async def _fresh_controller(self, deadline: float) -> int | None:
        """Ask for the controller again (after NOT_CONTROLLER or a lost controller): a
        Metadata request of our own, for no topic, to the least loaded broker. A controller
        the producer's cluster view does not list yet gets that view refreshed, and this
        attempt goes to the least loaded broker (any broker forwards to the controller)."""
        response: MetadataResponse = await self._retried(
            MetadataRequest([], allow_auto_topic_creation=False), None, deadline, "Metadata"
        )
        controller = response.controller_id
        if controller < 0:
            return None
        if controller not in self._metadata.cluster.brokers:
            self._metadata.request_update()
            self._wake_sender()
            return None
        return controller

    async def _to_controller(
        self, request: Request[_R], refresh: bool, deadline: float, what: str
    ) -> _R:
        """``request`` answered by the controller (or, none being known, the least loaded
        broker). Failures before it went out are retried here: a controller that cannot
        be connected to is looked up again, and if it is the same, the least loaded broker
        takes the request (in KRaft mode any broker forwards it to the active controller).
        A failure after it may have reached the broker raises :class:`_Sent`."""
        attempts = 0
        unreachable: set[int] = set()
        while True:
            node: int | None = None
            try:
                node = await self._fresh_controller(deadline) if refresh else self._controller()
                if node in unreachable:
                    node = None
                return await self._ask(request, node, deadline, what)
            except _NotSent as exc:
                if node is not None:
                    unreachable.add(node)
                refresh = True
                attempts = await self._retry_after(exc, attempts, deadline, what)

    async def _retried(
        self, request: Request[_R], node: int | None, deadline: float, what: str
    ) -> _R:
        """``request`` answered, retried on retriable failures until ``deadline``: for
        requests that change nothing (Metadata, DescribeConfigs)."""
        attempts = 0
        while True:
            try:
                return await self._ask(request, node, deadline, what)
            except _Sent as sent:
                attempts = await self._retry_after(sent.error, attempts, deadline, what)
            except _NotSent as exc:
                node = None
                attempts = await self._retry_after(exc, attempts, deadline, what)

    async def _ask(self, request: Request[_R], node: int | None, deadline: float, what: str) -> _R:
        """Send ``request`` to broker ``node`` (None: the least loaded) and wait for its
        answer, within the request timeout and ``deadline``.

        Raises:
            _Sent: the request went out and got no answer (a lost connection, a timeout):
                wraps the retriable error.
            _NotSent: ``node`` cannot be connected to now.
            KafkaError: not retriable (the broker does not support the request, a refused
                login) or the deadline passed before the request could go out.
        """
        connection = await self._connection(node, deadline, what)
        try:
            future = connection.send(request)
        except KafkaError as exc:
            if exc.retriable:  # the connection closed under the write: nothing went out
                raise _NotSent(f"{what}: {exc}") from exc
            raise
        # After the write: the connection counts the request's age from before it.
        sent_at = self._clock()
        wait = min(self._request_timeout, max(0.0, deadline - sent_at))
        try:
            # asyncio.wait, not wait_for: a cancellation of the caller always gets through.
            await asyncio.wait({future}, timeout=wait)
        except BaseException:
            future.cancel()  # cancelled: the answer, when it comes, is dropped
            raise
        if not future.done():
            if self._clock() - sent_at >= self._request_timeout:
                # As the sender does: a request past request_timeout_ms closes its
                # connection, which fails it with RequestTimedOutError.
                connection.check_request_timeouts(self._clock())
            if not future.done():
                future.cancel()
                raise _Sent(RequestTimedOutError(f"{what} got no answer within the call's timeout"))
        try:
            response = future.result()
        except KafkaError as exc:
            if exc.retriable:
                raise _Sent(exc) from exc
            raise
        assert response is not None  # every admin request expects an answer
        if isinstance(response, MetadataResponse):
            self._check_metadata(response, connection, what)
        return response

    def _check_metadata(
        self, response: MetadataResponse, connection: BrokerConnection, what: str
    ) -> None:
        """Refuse a Metadata answer the producer would refuse: one with a top-level error
        (v13+) or one from another cluster. Either is retried on another broker; the
        producer's own refresh meets the same answer and acts on it (REBOOTSTRAP_REQUIRED
        sends it back to the bootstrap servers; another cluster is logged as an ERROR).

        Raises:
            _NotSent: the answer is refused (retriable).
        """
        source = connection.description
        refused: KafkaError | None
        if response.error_code != 0:
            refused = error_for_code(response.error_code, f"metadata from {source}")
        else:
            refused = self._metadata.check_cluster(response.cluster_id, source)
            if refused is not None:
                self._connections.distrust(connection.node_id)
        if refused is not None:
            self._metadata.request_update()
            self._wake_sender()
            raise _NotSent(str(refused)) from refused

    async def _connection(self, node: int | None, deadline: float, what: str) -> BrokerConnection:
        """A connection to ``node`` (None: the least loaded) that can take a request now,
        waiting for one to connect or to free a slot until ``deadline``."""
        connections = self._connections
        poll = _FIRST_POLL
        while True:
            if connections.closed:
                raise ProducerClosedError("cannot administer topics: the producer is closed")
            now = self._clock()
            if node is None:
                connection = connections.least_loaded(now)
                if connection is not None:
                    return connection
                refused = connections.fatal_error()
                if refused is not None:
                    raise error_copy(refused, fresh=True)
                connections.ensure_any_connecting(now)
            else:
                ready = connections.ready(node)
                if ready is not None:
                    if ready.can_send():
                        return ready
                else:
                    refused_by = connections.auth_error(node)
                    if refused_by is not None:
                        raise error_copy(refused_by[0], fresh=True)
                    if not connections.is_connecting(node):
                        if connections.connection_delay(node, now) > 0:
                            raise _NotSent(f"{what}: broker {node} cannot be reached now")
                        connections.ensure_connecting(node, now)
            remaining = deadline - now
            if remaining <= 0:
                target = "a broker" if node is None else f"broker {node}"
                raise RequestTimedOutError(
                    f"{what}: no connection to {target} could take the request within the "
                    f"call's timeout{self._unreachable()}"
                )
            await asyncio.sleep(min(poll, remaining))
            poll = min(poll * 2, _MAX_POLL)

    def _unreachable(self) -> str:
        summary = self._connections.unreachable_summary()
        refusal = self._metadata.refusal
        if refusal is not None:
            # The brokers that answered for another cluster are asked nothing more.
            summary = f"{summary}; {refusal}" if summary else str(refusal)
        return f"; {summary}" if summary else ""

    # ---- timing ----------------------------------------------------------------------------

    def _broker_timeout_ms(self, deadline: float) -> int:
        """How long the controller may take: what is left of the call, at most the request
        timeout (a longer wait would outlive the request on the connection)."""
        left = min(max(0.0, deadline - self._clock()), self._request_timeout)
        return max(1, int(left * 1000))

    def _time_for(self, wait: float, deadline: float) -> bool:
        return self._clock() + wait < deadline

    async def _wait_throttle(
        self, throttle_ms: int, attempts: int, deadline: float, what: str
    ) -> int:
        """KIP-599: the controller's mutation quota refused some topics. Wait as long as
        the answer says (at least the retry backoff), then try them again."""
        wait = max(throttle_ms / 1000.0, self._backoff.backoff_ms(attempts) / 1000.0)
        log.info(
            "%s: throttled by the controller mutation quota (THROTTLING_QUOTA_EXCEEDED); "
            "trying again in %.3f s",
            what,
            wait,
        )
        await asyncio.sleep(min(wait, max(0.0, deadline - self._clock())))
        return attempts + 1

    async def _retry_after(
        self, error: KafkaError, attempts: int, deadline: float, what: str
    ) -> int:
        """Wait the retry backoff and return the attempts so far; raise ``error`` (with
        what it was for) when it is not retriable or the deadline would pass first."""
        delay = self._backoff.backoff_ms(attempts) / 1000.0
        if not error.retriable or self._clock() + delay >= deadline:
            if not error.retriable:
                raise error
            raise RequestTimedOutError(
                f"{what} did not complete within the call's timeout; the last attempt "
                f"failed: {error}"
            ) from error
        log.debug("%s: %s; trying again in %.3f s", what, error, delay)
        await asyncio.sleep(delay)
        return attempts + 1

    def _topics_changed(self, topics: Mapping[str, object]) -> None:
        """After topics were created or deleted: have the producer's metadata refreshed
        now when it follows any of them (records may be waiting for one)."""
        followed = set(self._metadata.topics)
        if any(name in followed for name in topics):
            self._metadata.request_update()
            self._wake_sender()


class _Sent(Exception):
    """A request went out and got no answer: ``error`` (retriable) says why. The broker
    may have acted on it."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error


def _creation(result: CreatableTopicResult, validate_only: bool, unanswered: bool) -> TopicCreation:
    name = result.name
    configs: Mapping[str, str | None] = MappingProxyType(
        {entry.name: entry.value for entry in result.configs or ()}
    )
    if result.error_code != 0:
        error = error_for_code(result.error_code, result.error_message, where=f"topic {name!r}")
        if unanswered and result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
            error = _with_note(
                error, "a CreateTopics sent earlier got no answer, and may have created it"
            )
        return TopicCreation(name, False, error)
    return TopicCreation(
        name,
        not validate_only,
        None,
        # Kafka answers a validate-only request with an id no topic will have.
        None if validate_only else result.topic_id,
        result.num_partitions,
        result.replication_factor,
        configs,
    )


def _topic_error(code: int, name: str) -> KafkaError:
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return error_for_code(code, f"topic {name!r} does not exist")
    return error_for_code(code, where=f"topic {name!r}")


def _description(name: str, topic: MetadataResponseTopic) -> TopicDescription:
    partitions = tuple(
        sorted(
            (
                PartitionDescription(
                    p.partition_index,
                    p.leader_id if p.leader_id >= 0 else None,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    tuple(p.offline_replicas),
                    p.leader_epoch,
                )
                for p in topic.partitions
            ),
            key=lambda p: p.partition,
        )
    )
    return TopicDescription(name, topic.topic_id, topic.is_internal, partitions)
