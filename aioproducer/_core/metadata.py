"""The producer's view of the cluster and when to refresh it.

``Cluster`` is an immutable snapshot built from one Metadata response. ``Metadata`` holds the
current snapshot, the topics the producer uses (dropped after ``metadata_max_idle_ms`` without
use), and the refresh policy: on age (``metadata_max_age_ms``), on request (unknown topics or
partitions, leader errors), with ``retry_backoff_ms`` between attempts. Waiters for a topic are
futures woken on each update.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from aioproducer.errors import (
    InconsistentClusterIdError,
    InvalidTopicError,
    KafkaError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from aioproducer.protocol.error_codes import ErrorCode

__all__ = ["Broker", "Cluster", "Metadata", "PartitionInfo", "TopicInfo", "validate_topic"]

log = logging.getLogger("aioproducer.metadata")

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_MAX_TOPIC_LENGTH = 249


def validate_topic(topic: object) -> str:
    """Check ``topic`` is a legal Kafka topic name, as the broker would; return it (as an
    exact ``str``).

    Raises:
        InvalidTopicError: empty, too long, ``.`` or ``..``, or with a character outside
            ``[a-zA-Z0-9._-]``.
    """
    if not isinstance(topic, str):
        raise InvalidTopicError(f"a topic name must be a str, not {type(topic).__name__}")
    if not topic:
        raise InvalidTopicError("a topic name cannot be empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"a topic name cannot be {topic!r}")
    if len(topic) > _MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name {topic[:40]!r}... is {len(topic)} characters long; the limit is "
            f"{_MAX_TOPIC_LENGTH}"
        )
    if not _LEGAL_TOPIC.match(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal: it may contain only ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    # An exact str: a subclass's instance could refer back to what holds the name (a
    # batch, a record's metadata), and those are out of the cyclic GC (_core/gc.py).
    return topic if type(topic) is str else str.__str__(topic)


@dataclass(frozen=True, slots=True)
class Broker:
    """A broker of the cluster."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as the last metadata saw it."""

    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic as the last metadata saw it."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    error_code: int = 0
    topic_id: bytes | None = None

    available_partitions: tuple[int, ...] = field(init=False, default=())
    """Partitions that have a leader (computed once: the partitioner reads it per record)."""

    def __post_init__(self) -> None:
        available = tuple(p.partition for p in self.partitions if p.leader >= 0)
        object.__setattr__(self, "available_partitions", available)

    @property
    def partition_count(self) -> int:
        """Number of partitions."""
        return len(self.partitions)


@dataclass(slots=True)
class Cluster:
    """An immutable snapshot of brokers, topics and leaders."""

    brokers: Mapping[int, Broker] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1
    _leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    _by_node: dict[int, list[tuple[str, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for topic in self.topics.values():
            for p in topic.partitions:
                if p.leader >= 0 and p.leader in self.brokers:
                    self._leaders[(topic.name, p.partition)] = p.leader
                    self._by_node.setdefault(p.leader, []).append((topic.name, p.partition))

    def leader_for(self, topic: str, partition: int) -> int:
        """The leader's node id, or -1 when unknown."""
        return self._leaders.get((topic, partition), -1)

    def partitions_for_node(self, node_id: int) -> list[tuple[str, int]]:
        """The partitions this broker leads."""
        return self._by_node.get(node_id, [])

    def topic(self, name: str) -> TopicInfo | None:
        """A topic with at least one partition, or None."""
        info = self.topics.get(name)
        if info is None or not info.partitions:
            return None
        return info

    def broker(self, node_id: int) -> Broker | None:
        """A broker by node id."""
        return self.brokers.get(node_id)


# Topic errors that mean "not there yet, keep waiting" rather than "give up".
_TRANSIENT_TOPIC_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    }
)


class Metadata:
    """The current cluster view and the refresh policy."""

    def __init__(
        self,
        *,
        max_age: float,
        max_idle: float,
        retry_backoff: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.cluster = Cluster()
        self._max_age = max_age
        self._max_idle = max_idle
        self._retry_backoff = retry_backoff
        self._loop = loop
        self._topics: dict[str, float] = {}
        self._need_update = True
        self._last_refresh_attempt = float("-inf")
        self._last_successful_refresh = float("-inf")
        self._waiters: set[asyncio.Future[bool]] = set()
        self._update_in_flight = False
        # Counts requests for a refresh. An answer satisfies only the requests made before
        # its Metadata request went out (as the Java client's Metadata.requestVersion): one
        # made while it was in flight, say for a NOT_LEADER_OR_FOLLOWER, may concern a change
        # that answer predates, so it still calls for another refresh.
        self._requests = 0
        self._requests_at_start = 0
        self.version = 0
        self.fatal_topic_errors: dict[str, KafkaError] = {}
        # Topics the broker said do not exist, logged once (until they show up).
        self._reported_unknown: set[str] = set()
        # When the refreshes that have failed since the last success began (None: the last
        # attempt succeeded): how long no metadata could be had (KIP-1102's trigger).
        self._failing_since: float | None = None
        #: Why the last answers were refused: they came from another cluster (None: no
        #: answer was refused since the last success). Errors of waiting sends say so.
        self.refusal: KafkaError | None = None
        self._refused_clusters: set[str] = set()

    @property
    def topics(self) -> list[str]:
        """The topics the producer asks metadata for."""
        return list(self._topics)

    def add_topic(self, topic: str, now: float) -> bool:
        """Track ``topic``; True when it is new (and an update was requested)."""
        new = topic not in self._topics
        self._topics[topic] = now
        if new:
            self.request_update()
        return new

    def touch(self, topic: str, now: float) -> None:
        """Note a use of ``topic`` (for idle expiry)."""
        self._topics[topic] = now

    def request_update(self) -> None:
        """Refresh as soon as the backoff allows.

        A refresh already in flight does not count: its request may predate whatever made
        the caller ask, so another one follows it.
        """
        self._need_update = True
        self._requests += 1

    @property
    def update_requested(self) -> bool:
        """True when a refresh is wanted now (not waiting for age)."""
        return self._need_update

    def time_to_next_update(self, now: float) -> float:
        """Seconds until a refresh is due (0 means now)."""
        if self._update_in_flight:
            return float("inf")
        backoff_left = self._last_refresh_attempt + self._retry_backoff - now
        if self._need_update:
            return max(0.0, backoff_left)
        age_left = self._last_successful_refresh + self._max_age - now
        return max(0.0, age_left, backoff_left)

    def update_started(self, now: float) -> None:
        """A Metadata request went out."""
        self._update_in_flight = True
        self._requests_at_start = self._requests
        self._last_refresh_attempt = now

    def update_failed(self, now: float, exc: BaseException) -> None:
        """The Metadata request failed; try again after the backoff."""
        self._update_in_flight = False
        self._need_update = True
        if self._failing_since is None:
            self._failing_since = self._last_refresh_attempt
        log.debug("metadata refresh failed: %s", exc)

    def no_broker(self, now: float) -> None:
        """A refresh was due but no broker could take the request."""
        if self._failing_since is None:
            self._failing_since = now

    def restart_failure_clock(self, now: float) -> None:
        """Count :meth:`failing_for` from ``now`` (after going back to the bootstrap
        servers, which get the whole trigger time again)."""
        self._failing_since = now

    def failing_for(self, now: float) -> float:
        """Seconds since the refreshes that keep failing began (0 when the last one
        succeeded, or none failed)."""
        if self._failing_since is None:
            return 0.0
        return now - self._failing_since

    def check_cluster(self, cluster_id: str | None, source: str) -> KafkaError | None:
        """The error refusing a Metadata answer from another cluster than the one this
        producer works with (None: the answer may be used). A producer that moved to
        another cluster would write records its idempotence and transactions know nothing
        about, under a producer id the new cluster never gave: it refuses loudly, logging
        an ERROR the first time each other cluster answers, and keeps trying."""
        known = self.cluster.cluster_id
        if cluster_id is None or known is None or cluster_id == known:
            return None
        error = InconsistentClusterIdError(
            f"{source} answered for cluster {cluster_id}, but this producer works with cluster "
            f"{known}: its metadata is refused (the bootstrap servers or the brokers' "
            "addresses now lead to another cluster; a producer moves to another cluster only "
            "as a new Producer)"
        )
        self.refusal = error
        if cluster_id not in self._refused_clusters:
            self._refused_clusters.add(cluster_id)
            log.error("%s", error)
        return error

    def update(
        self,
        brokers: Sequence[Broker],
        topics: Sequence[TopicInfo],
        now: float,
        *,
        cluster_id: str | None = None,
        controller_id: int = -1,
    ) -> Cluster:
        """Install a new snapshot from a Metadata response and wake the waiters."""
        # Requests for a refresh made while this answer's request was out still stand.
        self._need_update = self._update_in_flight and self._requests != self._requests_at_start
        self._update_in_flight = False
        self._last_successful_refresh = now
        self._failing_since = None
        self.refusal = None
        # Idle topics leave the metadata set.
        for name, last_used in list(self._topics.items()):
            if now - last_used > self._max_idle:
                del self._topics[name]
        topic_map: dict[str, TopicInfo] = {}
        for topic in topics:
            if topic.error_code == 0:
                topic = self._keep_newer_leaders(topic)
                topic_map[topic.name] = topic
                self.fatal_topic_errors.pop(topic.name, None)
                self._reported_unknown.discard(topic.name)
                if any(p.leader < 0 for p in topic.partitions):
                    # A leader is being elected: ask again soon.
                    self._need_update = True
                continue
            if topic.error_code in _TRANSIENT_TOPIC_ERRORS:
                if topic.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    self._need_update = True  # a leader or coordinator on its way: soon
                # A topic that does not exist is asked about again only while a send or
                # partitions_for() waits for it (each asks before waiting), as Java's
                # producer does: not every retry_backoff_ms until it leaves the metadata
                # set, as a topic deleted under an idle producer would be.
                if (
                    topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    and topic.name not in self._reported_unknown
                ):
                    self._reported_unknown.add(topic.name)
                    # Waiting is right (the topic may be being created), but a typo in a
                    # topic name should not look like a slow broker until max_block_ms.
                    log.warning(
                        "topic %r does not exist on the cluster (UNKNOWN_TOPIC_OR_PARTITION): "
                        "sends to it and partitions_for() wait up to max_block_ms for it to "
                        "be created, then fail; check the name, or create the topic (unless "
                        "the brokers create topics on first use, auto.create.topics.enable, "
                        "in which case it appears shortly)",
                        topic.name,
                    )
            else:
                self.fatal_topic_errors[topic.name] = error_for_code(
                    topic.error_code, f"metadata for topic {topic.name!r}"
                )
            # Keep what we knew of a topic with a transient error.
            previous = self.cluster.topics.get(topic.name)
            if previous is not None and topic.error_code in _TRANSIENT_TOPIC_ERRORS:
                topic_map[topic.name] = previous
        before = self.cluster
        self.cluster = Cluster(
            brokers={b.node_id: b for b in brokers},
            topics=topic_map,
            # An answer without one (a very old broker) does not forget the id known.
            cluster_id=cluster_id if cluster_id is not None else before.cluster_id,
            controller_id=controller_id,
        )
        _log_changes(before, self.cluster)
        self.version += 1
        self.wake_waiters()
        return self.cluster

    def _keep_newer_leaders(self, topic: TopicInfo) -> TopicInfo:
        """``topic`` from a Metadata response, with each partition whose leader epoch is
        older than the one known kept as known (KIP-320, Java's
        ``Metadata.updateLatestMetadata``): a broker behind on metadata must not move a
        partition back to a leader it had before. A recreated topic (another topic id)
        takes the new metadata whole."""
        previous = self.cluster.topics.get(topic.name)
        if previous is None or (
            topic.topic_id is not None
            and previous.topic_id is not None
            and topic.topic_id != previous.topic_id
        ):
            return topic
        known = {p.partition: p for p in previous.partitions}
        partitions: list[PartitionInfo] = []
        kept = False
        for partition in topic.partitions:
            old = known.get(partition.partition)
            if old is not None and 0 <= partition.leader_epoch < old.leader_epoch:
                log.debug(
                    "keeping the leader of %s-%d at epoch %d over stale metadata at epoch %d",
                    topic.name,
                    partition.partition,
                    old.leader_epoch,
                    partition.leader_epoch,
                )
                partitions.append(old)
                kept = True
            else:
                partitions.append(partition)
        if not kept:
            return topic
        return TopicInfo(topic.name, tuple(partitions), topic.error_code, topic.topic_id)

    def update_leaders(
        self,
        leaders: Mapping[tuple[str, int], tuple[int, int]],
        endpoints: Sequence[Broker] = (),
    ) -> set[tuple[str, int]]:
        """Install the leaders a Produce response named (KIP-951, Java's
        ``Metadata.updatePartitionLeadership``): ``{(topic, partition): (leader id, leader
        epoch)}``, with ``endpoints`` for leaders the cluster view does not know yet. A
        leader replaces the known one only with a newer leader epoch. Returns the
        partitions whose leader changed."""
        cluster = self.cluster
        brokers = dict(cluster.brokers)
        for broker in endpoints:
            brokers.setdefault(broker.node_id, broker)
        topics = dict(cluster.topics)
        changed: set[tuple[str, int]] = set()
        for (name, index), (leader, epoch) in leaders.items():
            info = topics.get(name)
            if info is None or leader < 0 or leader not in brokers:
                continue
            partitions = list(info.partitions)
            for position, partition in enumerate(partitions):
                if partition.partition != index:
                    continue
                if epoch <= partition.leader_epoch or partition.leader == leader:
                    break
                partitions[position] = PartitionInfo(
                    index, leader, epoch, partition.replicas, partition.isr
                )
                topics[name] = TopicInfo(name, tuple(partitions), info.error_code, info.topic_id)
                changed.add((name, index))
                log.info(
                    "leader of %s-%d moved from broker %d to %d (leader epoch %d), as a "
                    "Produce answer named it",
                    name,
                    index,
                    partition.leader,
                    leader,
                    epoch,
                )
                info = topics[name]
                break
        if changed:
            self.cluster = Cluster(
                brokers=brokers,
                topics=topics,
                cluster_id=cluster.cluster_id,
                controller_id=cluster.controller_id,
            )
            self.version += 1
        return changed

    async def wait_for_update(self, timeout: float) -> bool:
        """Wait for the next update, at most ``timeout`` seconds; False on timeout."""
        # Not asyncio.wait_for: up to Python 3.11 it returns normally when the task is
        # cancelled in the loop turn in which the update arrives, so a cancelled send went
        # on waiting for metadata until max_block_ms. Awaiting the waiter itself, a cancel
        # always reaches the caller.
        waiter: asyncio.Future[bool] = self._loop.create_future()
        self._waiters.add(waiter)
        timer = self._loop.call_later(timeout, _resolve_waiter, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiters.discard(waiter)  # timed out or cancelled: no update will take it
            if not waiter.done():
                waiter.cancel()

    def wake_waiters(self, updated: bool = True) -> None:
        """Wake everyone waiting for an update (e.g. on close); ``updated`` is what
        :meth:`wait_for_update` returns to them (False: look again, nothing was refreshed)."""
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            _resolve_waiter(waiter, updated)

    def check_topic(self, topic: str) -> None:
        """Raise the fatal metadata error of ``topic``, if the broker reported one."""
        exc = self.fatal_topic_errors.get(topic)
        if exc is not None:
            raise type(exc)(exc.message)

    @staticmethod
    def unknown_topic_error(topic: str, waited_ms: float, partition: int | None) -> KafkaError:
        """The error for a topic (or partition) that did not appear within max_block_ms."""
        if partition is None:
            return UnknownTopicOrPartitionError(
                f"topic {topic!r} not present in metadata after {waited_ms:.0f} ms "
                "(max_block_ms)"
            )
        return UnknownTopicOrPartitionError(
            f"partition {partition} of topic {topic!r} not present in metadata after "
            f"{waited_ms:.0f} ms (max_block_ms)"
        )

    @staticmethod
    def partition_out_of_range_error(topic: str, partition: int, count: int) -> KafkaError:
        """The error for a record sent to a partition the topic does not have (not retriable:
        the topic's metadata is fresh)."""
        return UnknownTopicOrPartitionError(
            f"partition {partition} is out of range: topic {topic!r} has "
            f"{count} partition(s), 0 to {count - 1}",
            retriable=False,
        )

    def snapshot(self) -> dict[str, Any]:
        """A small summary for logs and debugging."""
        return {
            "brokers": sorted(self.cluster.brokers),
            "topics": {t.name: t.partition_count for t in self.cluster.topics.values()},
            "version": self.version,
        }


def _resolve_waiter(waiter: asyncio.Future[bool], updated: bool) -> None:
    if not waiter.done():
        waiter.set_result(updated)


# Leader moves listed in one log line, at most; the rest are counted.
_MOVES_SHOWN: Final = 10


def _log_changes(old: Cluster, new: Cluster) -> None:
    """Log what a metadata update changed, once, at INFO: the cluster id when first seen
    (another one is refused before: Metadata.check_cluster), brokers that joined or left,
    and, for each topic known before, a change of partition count and the partitions whose
    leader moved."""
    if new.cluster_id is not None and old.cluster_id is None:
        log.info("cluster id %s", new.cluster_id)
    if old.brokers:
        joined = [b for node, b in sorted(new.brokers.items()) if node not in old.brokers]
        left = [b for node, b in sorted(old.brokers.items()) if node not in new.brokers]
        if joined or left:
            log.info(
                "brokers joined: %s; left: %s",
                ", ".join(f"{b.node_id} ({b.host}:{b.port})" for b in joined) or "none",
                ", ".join(f"{b.node_id} ({b.host}:{b.port})" for b in left) or "none",
            )
    for name, topic in new.topics.items():
        before = old.topics.get(name)
        if before is None:
            continue
        if len(topic.partitions) != len(before.partitions):
            log.info(
                "topic %r has %d partitions now (had %d)",
                name,
                len(topic.partitions),
                len(before.partitions),
            )
        moves: list[str] = []
        for partition in topic.partitions:
            was = old.leader_for(name, partition.partition)
            now = new.leader_for(name, partition.partition)
            if was != now:
                moves.append(
                    f"{partition.partition}: {was if was >= 0 else 'none'} -> "
                    f"{now if now >= 0 else 'none'}"
                )
        if moves:
            shown = ", ".join(moves[:_MOVES_SHOWN])
            more = len(moves) - _MOVES_SHOWN
            log.info(
                "leaders of topic %r moved (partition: old -> new broker): %s%s",
                name,
                shown,
                f" and {more} more" if more > 0 else "",
            )
