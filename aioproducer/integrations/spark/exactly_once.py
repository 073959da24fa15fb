"""Exactly once from Spark to Kafka: a two-phase commit over Kafka transactions.

Chosen with ``.option("delivery.guarantee", "exactly_once")`` on the ``"aioproducer"``
data source, for batch ``df.write`` and Structured Streaming ``df.writeStream``. Each task
prepares a transaction under its own transactional id (:func:`_produce_prepared`); the
driver checks them all (:func:`_check_prepared`), puts a batch write's decision on record
(:class:`_Decision`), commits them (:func:`_commit`) and aborts what lost attempts left
open (:func:`_abort_left_open`). A streaming task's transaction also commits a marker
(:class:`_Marker`) that makes a replayed micro-batch harmless, and the driver records each
micro-batch's layout (:func:`_record_batch`); a batch write completes an earlier one whose
driver stopped while committing (:func:`_recover`).

How and why, and what does not hold: the docs page "Delivery guarantees of the Spark
sink" (docs/spark-delivery.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import uuid
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, cast

import crc32c

from aioproducer import BatchResults, PreparedTransaction, Producer, ProducerConfig
from aioproducer.errors import (
    ConfigurationError,
    IllegalStateError,
    KafkaError,
    TransactionAbortedError,
    UnsupportedVersionError,
)
from aioproducer.integrations.spark.options import SinkOptions, _Layout
from aioproducer.integrations.spark.producers import _run
from aioproducer.integrations.spark.rows import (
    _chunks,
    _items,
    _partition_id,
    _prepend,
    _row_error,
    _RowRefused,
    _send_chunk,
)
from aioproducer.integrations.spark.sink import (
    KafkaBatchWriter,
    KafkaCommitMessage,
    KafkaStreamWriter,
)
from aioproducer.two_phase import (
    TransactionDescription,
    _fetch_committed,
    complete_prepared_transaction,
    describe_transactions,
    list_transactions,
)

__all__ = [
    "TransactionalBatchWriter",
    "TransactionalCommitMessage",
    "TransactionalStreamWriter",
]

log = logging.getLogger("aioproducer.integrations.spark")

# The local property Spark's micro-batch execution sets to the batch id for its tasks.
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
# The local property Spark's streaming execution sets to the query's id: kept in the
# checkpoint, so the same for every run of a query, and new after a checkpoint is deleted.
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class TransactionalCommitMessage(KafkaCommitMessage):
    """What an exactly-once partition task reports to the driver.

    Attributes:
        prepared: the task's prepared transaction, which the driver commits; None when the
            task wrote nothing.
        already_written: a replayed micro-batch this partition had committed already:
            nothing was written again.
        attempt: the task's attempt number; the driver aborts what the attempts before it
            left open.
        prefix: the transactional id prefix the task used (streaming: derived from the
            query's id unless given); None for a batch write, whose driver chose it.
        query_id: the streaming query's id (None for a batch write).
        digest: a streaming task's digest of its partition's input rows (see
            :class:`_InputDigest`), written or not.
    """

    prepared: PreparedTransaction | None = None
    already_written: bool = False
    attempt: int = 0
    prefix: str | None = None
    query_id: str | None = None
    digest: str | None = None


@dataclass(frozen=True)
class _Marker:
    """The offset that records, inside a task's transaction, that a micro-batch's
    partition was written: ``offset`` (batch id + 1) of ``topic``-0 in ``group``, with
    metadata naming the query that wrote it and the digest of the rows it covered."""

    group: str
    topic: str
    offset: int
    query_id: str

    @property
    def partition(self) -> tuple[str, int]:
        return (self.topic, 0)

    def metadata(self, digest: str) -> str:
        return json.dumps(
            {"query": self.query_id, "batch": self.offset - 1, "rows": digest},
            separators=(",", ":"),
        )


def _read_metadata(text: str | None, query_id: str | None = None) -> dict[str, Any] | None:
    """The fields of a marker's (or batch record's) metadata; None for anything else (no
    metadata, or a marker written before markers named their query), and, given
    ``query_id``, for the metadata of another query."""
    fields = _json_object(text)
    if fields is None or not isinstance(fields.get("query"), str):
        return None
    return fields if query_id is None or fields["query"] == query_id else None


def _encoded(value: Any) -> bytes:
    """``value`` (a column of a row) as bytes that no other value shares: a type tag, then a
    length or the contents, so that null differs from empty and fields cannot run into
    each other."""
    if value is None:
        return b"\x00"
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return b"\x01" + len(data).to_bytes(4, "big") + data
    if isinstance(value, str):
        data = value.encode()
        return b"\x02" + len(data).to_bytes(4, "big") + data
    if isinstance(value, bool | int):
        return b"\x03" + int(value).to_bytes(9, "big", signed=True)
    if isinstance(value, Mapping):
        value = sorted(value.items())
    if isinstance(value, list | tuple):
        return b"\x04" + len(value).to_bytes(4, "big") + b"".join(_encoded(item) for item in value)
    data = repr(value).encode()
    return b"\x05" + len(data).to_bytes(4, "big") + data


#: The columns a row can have (see the Spark sink's layout), in the order a row's digest
#: takes them. A column a chunk lacks counts as null in every row: the Arrow path leaves
#: out a key column whose values are all null.
_DIGEST_COLUMNS = ("topic", "partition", "key", "value", "timestamp", "headers")


class _InputDigest:
    """An order-independent digest of a partition's input rows: how many, and the sum of a
    64-bit checksum (CRC-32 and CRC-32C) of each row's columns, each encoded with its type
    and length. A replayed micro-batch whose partition holds the same rows has the same
    digest, in whatever order and chunks they come."""

    def __init__(self) -> None:
        self.rows = 0
        self.total = 0

    def add(self, columns: Mapping[str, list[Any]]) -> None:
        pairs: Any = columns.get("pairs")
        if pairs is not None:
            # A chunk made from the Arrow buffers (rows._arrow_pairs): its (key, value) rows,
            # as the columns they came from (a batch without keys has no key column).
            rows = list(pairs)
            columns = {"value": [row[1] for row in rows]}
            if not pairs.keyless():
                columns["key"] = [row[0] for row in rows]
        count = len(columns["value"])
        present = [columns.get(name) for name in _DIGEST_COLUMNS]
        total = self.total
        for index in range(count):
            row = b"".join(
                _encoded(column[index]) if column is not None else b"\x00" for column in present
            )
            total += (zlib.crc32(row) << 32) | crc32c.crc32c(row)
        self.total = total % (1 << 64)
        self.rows += count

    def __str__(self) -> str:
        return f"{self.rows}:{self.total:016x}"


def _derived_prefix(query_id: str) -> str:
    """A streaming query's prefix when none is given: from its id, which its checkpoint
    keeps (however the checkpoint's path is spelled), and which a new checkpoint renews."""
    return f"aioproducer-spark-{hashlib.sha256(query_id.encode()).hexdigest()[:20]}"


def _transactional_id(prefix: str, partition: int, attempt: int) -> str:
    """The transactional id of a task: ``<prefix>-<partition>`` for its first attempt,
    ``<prefix>-<partition>-retry<n>`` for attempt ``n``. Each attempt has its own, so a
    failed attempt still running (its Python worker outlives the task) cannot fence the
    attempt that replaced it."""
    base = f"{prefix}-{partition}"
    return base if attempt == 0 else f"{base}-retry{attempt}"


def _earlier_attempts(prefix: str, partition: int, attempt: int) -> list[str]:
    return [_transactional_id(prefix, partition, earlier) for earlier in range(attempt)]


def _transactional(sink: SinkOptions, transactional_id: str) -> Producer:
    """A producer with the sink's options and ``transactional_id`` (not started)."""
    return sink.producer(**{"transactional.id": transactional_id})


#: Completions (and fencing starts) under way at once: each opens connections of its own
#: (bootstrap, then the coordinator), so a write of thousands of partitions must not open
#: them all together.
_COMPLETIONS_AT_ONCE = 32


async def _fence(
    sink: SinkOptions, transactional_ids: list[str]
) -> list[tuple[str, BaseException]]:
    """Start (then close) a transactional producer under each id: each start fences the
    earlier producers with that id and aborts the transaction they left open. The
    (id, error) of each that failed."""

    slots = asyncio.Semaphore(_COMPLETIONS_AT_ONCE)

    async def fence(transactional_id: str) -> None:
        async with slots:
            producer = _transactional(sink, transactional_id)
            await producer.start()
            await producer.close()

    results = await asyncio.gather(
        *(fence(transactional_id) for transactional_id in transactional_ids),
        return_exceptions=True,
    )
    return [
        (transactional_id, result)
        for transactional_id, result in zip(transactional_ids, results, strict=True)
        if isinstance(result, BaseException)
    ]


async def _produce_prepared(
    sink: SinkOptions,
    layout: _Layout,
    chunks: Iterator[Mapping[str, list[Any]]],
    transactional_id: str,
    marker: _Marker | None,
    digest: _InputDigest | None = None,
) -> tuple[PreparedTransaction | None, int, bool]:
    """Send every chunk in one transaction under ``transactional_id`` and prepare it:
    (the prepared transaction, records sent, already written). An empty partition needs
    no transaction; a micro-batch partition whose ``marker`` is committed already, by the
    same query, is not written again (its rows must be the ones that marker covered); an
    empty micro-batch partition still starts the producer, to abort what a crashed run left
    open under its transactional id. ``digest`` takes every row of the partition.

    It fences no other attempt of its task: a speculative copy (attempt 1 while attempt 0
    goes on) would kill the attempt Spark keeps. What the attempts that lose leave open,
    the driver aborts (:func:`_abort_left_open`)."""
    position = 0
    if marker is not None and digest is None:
        digest = _InputDigest()
    try:
        first = next(chunks, None)
        if first is None and marker is None:
            return None, 0, False
        producer = _transactional(sink, transactional_id)
        # Starting fences any earlier producer with this id (a crashed run of the query)
        # and aborts the transaction it left open.
        await producer.start()
        try:
            if marker is not None:
                assert digest is not None
                committed = await _fetch_committed(
                    marker.group, [marker.partition], config=producer.config
                )
                offset, metadata = committed[marker.partition]
                recorded = _read_metadata(metadata, marker.query_id)
                if recorded is not None and offset > marker.offset:
                    raise IllegalStateError(
                        f"Spark runs micro-batch {marker.offset - 1} of query "
                        f"{marker.query_id}, but its Spark partition "
                        f"{marker.group.rsplit('-', 1)[-1]} committed micro-batch "
                        f"{offset - 1} already: the checkpoint is older than what the query "
                        "wrote (restored from a backup, or its last offsets and commits "
                        "removed). Writing the micro-batch could write rows twice, skipping "
                        "it could lose rows: start the query on a new checkpoint, or remove "
                        f"the markers (the consumer groups {marker.group.rsplit('-', 1)[0]}-<n> "
                        "and -batches) to write the micro-batches again"
                    )
                if recorded is not None and offset == marker.offset:
                    if offset == marker.offset:
                        # The replay of the micro-batch that marker recorded: only the
                        # same rows may be skipped (a replay split into partitions another
                        # way would lose rows here, or write others twice).
                        for columns in _prepend(first, chunks) if first is not None else ():
                            digest.add(columns)
                        if str(digest) != recorded.get("rows"):
                            raise IllegalStateError(
                                f"micro-batch {marker.offset - 1} is replayed with other rows "
                                f"in Spark partition {marker.group.rsplit('-', 1)[-1]} "
                                f"than the run that committed it (rows:digest "
                                f"{digest} now, {recorded.get('rows')} then): its source "
                                "or plan split it into partitions differently (a file "
                                "source after a change of spark.default.parallelism or of "
                                "the cores, say). Writing it could lose rows or write them "
                                "twice: restart the query with the partitioning of the run "
                                "that committed it"
                            )
                    log.info(
                        "transactional id %r: micro-batch %d was committed already; not "
                        "writing it again",
                        transactional_id,
                        marker.offset - 1,
                    )
                    await producer.close()
                    return None, 0, True
            if first is None:
                await producer.close()
                return None, 0, False
            await producer.begin_transaction()
            sent = 0
            pending: deque[BatchResults] = deque()
            async for columns in _read_off_the_loop(first, chunks):
                if digest is not None:
                    digest.add(columns)
                topic, items = _items(layout, sink.topic, columns)
                if not items:
                    continue
                results = await _send_chunk(producer, layout, topic, items)
                pending.append(results)
                sent += len(items)
                position += len(items)
                while pending and pending[0].done():
                    await pending.popleft()
            await producer.flush()
            while pending:
                await pending.popleft()
            if marker is not None:
                assert digest is not None
                await producer.send_offsets_to_transaction(
                    {marker.partition: (marker.offset, marker.metadata(str(digest)))},
                    marker.group,
                )
            prepared = await producer.prepare_transaction()
        except BaseException:
            # A close that may wait aborts the open (not yet prepared) transaction with
            # EndTxn; close(timeout=0) would leave it open until transaction.timeout.ms,
            # holding back consumers reading committed data.
            await producer.close(timeout=producer.config.request_timeout_ms / 1000.0)
            raise
        await producer.close()
        return prepared, sent, False
    except _RowRefused as refused:
        raise _row_error(position + refused.index, refused.column, refused.error) from (
            refused.error
        )


_END: Final = object()


async def _read_off_the_loop(
    first: Mapping[str, list[Any]], chunks: Iterator[Mapping[str, list[Any]]]
) -> AsyncIterator[Mapping[str, list[Any]]]:
    """``first``, then the chunks of ``chunks``, each read on a worker thread: Spark's input
    may be slow to come (an upstream stage, a UDF), and read on the event loop it would stop
    the producer sending what the task took before (and let its batches reach their delivery
    timeout while the input waits). One thread reads at a time, in order."""
    yield first
    loop = asyncio.get_running_loop()
    while True:
        columns: object = await loop.run_in_executor(None, next, chunks, _END)
        if columns is _END:
            return
        yield cast(Mapping[str, list[Any]], columns)


def _attempt_number() -> int:
    context = _task_context()
    return int(context.attemptNumber()) if context is not None else 0


def _task_context() -> Any:
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    return TaskContext.get()


def _completion_config(sink: SinkOptions) -> ProducerConfig:
    config = {k: v for k, v in sink.config.items() if k != "transactional.id"}
    return ProducerConfig.from_options(config, **sink.options)


async def _complete_each(
    prepared: list[PreparedTransaction], commit: bool, config: ProducerConfig
) -> list[BaseException | None]:
    """Commit (or abort) each of ``prepared``, ``_COMPLETIONS_AT_ONCE`` at a time; the error
    of each, or None."""
    slots = asyncio.Semaphore(_COMPLETIONS_AT_ONCE)

    async def complete(p: PreparedTransaction) -> BaseException | None:
        async with slots:
            try:
                await complete_prepared_transaction(p, commit=commit, config=config)
            except Exception as exc:
                return exc
            return None

    return list(await asyncio.gather(*(complete(p) for p in prepared)))


async def _complete_all(
    sink: SinkOptions,
    messages: list[Any],
    commit: bool,
    what: str,
) -> list[tuple[int, BaseException]]:
    """Commit (or abort) every prepared transaction of ``messages`` at once; the
    (partition, error) of each that failed."""
    prepared = [m for m in messages if isinstance(m, TransactionalCommitMessage) and m.prepared]
    if not prepared:
        return []
    config = _completion_config(sink)
    results = await _complete_each(
        [m.prepared for m in prepared if m.prepared is not None], commit, config
    )
    failures = [
        (m.partition_id, result)
        for m, result in zip(prepared, results, strict=True)
        if isinstance(result, BaseException)
    ]
    done = len(prepared) - len(failures)
    log.info(
        "%s: %s %d of %d partition transactions",
        what,
        "committed" if commit else "aborted",
        done,
        len(prepared),
    )
    return failures


async def _check_cluster(sink: SinkOptions) -> None:
    """Refuse, before any row is written, a cluster whose brokers cannot list and describe
    transactions (Kafka before 3.0, KIP-664). Without DescribeTransactions the commit cannot
    check that every partition's transaction is still open before committing any (one that
    outlived its timeout would leave the others committed: half the rows); without
    ListTransactions it cannot find what lost attempts left open. A cluster that cannot be
    asked now (within ``request_timeout_ms``) is not refused here: the commit checks every
    transaction again, and refuses to commit any on a broker that cannot describe them.

    Raises:
        UnsupportedVersionError: a broker of the cluster is older than Kafka 3.0.
    """
    config = _completion_config(sink)
    try:
        await list_transactions(
            states=("Ongoing",),
            transactional_id_prefix=f"aioproducer-check-{uuid.uuid4().hex}-",
            config=config,
            timeout=min(config.max_block_ms, config.request_timeout_ms) / 1000.0,
        )
    except UnsupportedVersionError as exc:
        raise UnsupportedVersionError(
            "delivery.guarantee exactly_once needs Kafka 3.0 or later: before committing "
            "any partition's transaction the sink checks that every one is still open "
            "(DescribeTransactions), and it finds the transactions lost attempts left open "
            f"(ListTransactions, KIP-664). This cluster cannot: {exc}. Nothing was written; "
            "with this cluster, use delivery.guarantee at_least_once"
        ) from exc
    except KafkaError as exc:
        log.debug("could not ask the cluster for its transactions before the write: %s", exc)


async def _left_open(
    sink: SinkOptions, prefix: str, messages: list[Any], keep: frozenset[str]
) -> list[str]:
    """The transactional ids of this write (or query) whose transactions are still open and
    that no task's commit message carries (``keep``): attempts that lost (failed, or
    speculative copies Spark did not keep), and, for a restarted query, Spark partitions
    the new run no longer has. Listed from the coordinators (ListTransactions); where a
    cluster cannot list, the ids of the failed attempts before each retried task."""
    shape = re.compile(re.escape(prefix) + r"-\d+(?:-retry\d+)?")
    try:
        listing = await list_transactions(
            states=("Ongoing",),
            transactional_id_prefix=f"{prefix}-",
            config=_completion_config(sink),
        )
    except KafkaError as exc:
        log.warning(
            "could not list the open transactions of %r (%s): aborting only those of the "
            "failed attempts before each retried task",
            prefix,
            exc,
        )
        return [
            transactional_id
            for m in messages
            if isinstance(m, TransactionalCommitMessage) and m.attempt > 0
            for transactional_id in _earlier_attempts(prefix, m.partition_id, m.attempt)
        ]
    return [
        t.transactional_id
        for t in listing
        if shape.fullmatch(t.transactional_id) and t.transactional_id not in keep
    ]


def _abort_left_open(
    sink: SinkOptions, prefix: str, messages: list[Any], keep: frozenset[str], what: str
) -> None:
    """Abort every transaction of the write that will never be committed (see
    :func:`_left_open`), so that consumers reading committed data are not held back until
    ``transaction.timeout.ms``: starting a producer with each id fences it and aborts."""

    async def sweep() -> list[tuple[str, BaseException]]:
        ids = await _left_open(sink, prefix, messages, keep)
        if ids:
            log.info("%s: aborting %d transactions left open: %s", what, len(ids), ids)
        return await _fence(sink, ids)

    for transactional_id, error in _run(sweep()):
        log.warning(
            "%s: could not abort the transaction left open under %r (the coordinator "
            "aborts it after transaction.timeout.ms): %s",
            what,
            transactional_id,
            error,
        )


def _committed_ids(
    messages: list[Any], failures: list[tuple[int, BaseException]]
) -> frozenset[str]:
    failed = {partition for partition, _ in failures}
    return frozenset(
        m.prepared.transactional_id
        for m in messages
        if isinstance(m, TransactionalCommitMessage)
        and m.prepared is not None
        and m.partition_id not in failed
    )


def _margin_ms(sink: SinkOptions, description: TransactionDescription) -> float:
    """How much of its timeout a prepared transaction must have left for the driver to
    commit it: time for the EndTxn requests (``request.timeout.ms``), at most a tenth of
    the timeout, which also absorbs a small skew between the driver's clock and the
    coordinator's."""
    request_timeout = _completion_config(sink).request_timeout_ms
    return min(float(request_timeout), description.timeout_ms / 10.0)


def _refusal(
    sink: SinkOptions,
    message: TransactionalCommitMessage,
    description: TransactionDescription | None,
) -> str | None:
    """Why the prepared transaction of ``message`` must not be counted on to commit; None
    if it is open under its producer id and epoch with time enough left."""
    prepared = message.prepared
    assert prepared is not None
    where = f"Spark partition {message.partition_id} ({prepared.transactional_id!r})"
    if description is None:
        return f"{where}: the coordinator does not know its transactional id"
    if not description.matches(prepared):
        return (
            f"{where}: prepared under producer id {prepared.producer_id}, epoch "
            f"{prepared.producer_epoch}, but the coordinator holds {description.state} "
            f"under producer id {description.producer_id}, epoch "
            f"{description.producer_epoch} (aborted after transaction.timeout.ms, or "
            "fenced by a newer producer with its transactional id)"
        )
    left = description.time_left_ms()
    if left < _margin_ms(sink, description):
        return (
            f"{where}: {max(left, 0.0) / 1000.0:.1f} s left of its "
            f"transaction.timeout.ms ({description.timeout_ms} ms), too little to commit "
            "every partition before the coordinator aborts it"
        )
    return None


async def _check_prepared(sink: SinkOptions, messages: list[Any], what: str) -> None:
    """Before the first EndTxn(commit): every prepared transaction must still be open under
    its producer id and epoch, with time left (DescribeTransactions), or nothing is
    committed: committing the others would write the batch in part.

    Raises:
        TransactionAbortedError: a transaction is gone or about to time out (the caller
            aborts them all).
        KafkaError: the coordinators could not be asked.
    """
    prepared = [m for m in messages if isinstance(m, TransactionalCommitMessage) and m.prepared]
    if not prepared:
        return
    try:
        found = await describe_transactions(
            [m.prepared.transactional_id for m in prepared if m.prepared is not None],
            config=_completion_config(sink),
        )
    except UnsupportedVersionError as exc:
        # Committing unchecked would write half the rows when one transaction outlived its
        # timeout: nothing is committed.
        raise TransactionAbortedError(
            f"{what}: nothing was committed, and every prepared transaction is aborted: "
            "delivery.guarantee exactly_once needs Kafka 3.0 or later, whose brokers "
            f"describe transactions (KIP-664), and a broker of this cluster cannot ({exc}); "
            "with this cluster, use delivery.guarantee at_least_once"
        ) from exc
    refusals = [
        reason
        for m in prepared
        if m.prepared is not None
        and (reason := _refusal(sink, m, found.get(m.prepared.transactional_id))) is not None
    ]
    if refusals:
        raise TransactionAbortedError(
            f"{what}: nothing was committed, and every prepared transaction is aborted: "
            f"{len(refusals)} of {len(prepared)} could not be committed with the others "
            f"({'; '.join(refusals)}). A write that lasts longer than "
            "transaction.timeout.ms needs a longer kafka.transaction.timeout.ms (up to the "
            "brokers' transaction.max.timeout.ms)"
        )


def _commit(
    sink: SinkOptions,
    prefix: str,
    messages: list[Any],
    what: str,
    before: Callable[[str], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Check every prepared transaction of ``messages``, then commit them all, then abort
    what the write's other attempts left open. ``before`` puts the decision on record
    (``"committing"``) after the check and before the first EndTxn, and ``"done"`` once
    every one was committed. Once the decision is on record, no transaction it names is
    aborted here: one that could not be committed now is left open for the next write
    under the prefix to complete.

    Raises:
        TransactionAbortedError: the check failed: every transaction is aborted.
        KafkaError: a transaction could not be committed.
    """
    try:
        _run(_check_prepared(sink, messages, what))
        if before is not None:
            _run(before("committing"))
    except BaseException:
        _abort(sink, prefix, messages, f"{what}, refused")
        raise
    failures = _run(_complete_all(sink, messages, True, what))
    decided = before is not None
    not_done: KafkaError | None = None
    if before is not None and not failures:
        try:
            _run(before("done"))
        except KafkaError as exc:
            not_done = exc
    keep = _committed_ids(messages, [] if decided else failures)
    _abort_left_open(sink, prefix, messages, keep, what)
    if not failures and not_done is not None:
        # Every transaction is committed, but the record still says "committing": the next
        # write under the prefix finds each one committed and takes this write as one it
        # completed, so a write of the same rows to the topic would be skipped. Say so.
        raise IllegalStateError(
            f"{what} is committed in full, but its decision record could not be marked "
            f"done ({not_done}): the next write under this transactional.id.prefix will "
            "take it for a write it completed, and not write the same rows to this topic "
            "again (a rerun of this write is skipped)"
        ) from not_done
    if not failures:
        return
    partition, first = failures[0]
    if not isinstance(first, KafkaError):
        raise first
    total = sum(1 for m in messages if isinstance(m, TransactionalCommitMessage) and m.prepared)
    failed = ", ".join(str(p) for p, _ in failures)
    if decided:
        summary = (
            f"{what} is decided but committed in part: {len(failures)} of {total} partition "
            f"transactions could not be committed now (Spark partitions {failed}). They are "
            "left open: the next write under this transactional.id.prefix commits them "
            "before it starts, if it runs before transaction.timeout.ms ends them"
        )
    else:
        summary = (
            f"{what}: {len(failures)} of {total} partition transactions could not be "
            f"committed (Spark partitions {failed})"
        )
    first.args = (f"{summary}; partition {partition}: {first.message}", *first.args[1:])
    raise first


async def _outcomes(sink: SinkOptions, messages: list[Any], partitions: set[int]) -> dict[int, str]:
    """For the prepared transactions of ``partitions`` that could not be aborted, what
    became of them, in words: committed already, aborted already, or unknown."""
    prepared = {
        m.partition_id: m.prepared
        for m in messages
        if isinstance(m, TransactionalCommitMessage)
        and m.prepared is not None
        and m.partition_id in partitions
    }
    try:
        found = await describe_transactions(
            [p.transactional_id for p in prepared.values()], config=_completion_config(sink)
        )
    except KafkaError:
        found = {}
    outcomes = {}
    for partition, p in prepared.items():
        d = found.get(p.transactional_id)
        outcome = _outcome(p, d)
        if outcome == "committed":
            outcomes[partition] = (
                "it was committed already: its rows are in Kafka, for consumers reading "
                "committed data"
            )
        elif outcome == "aborted":
            outcomes[partition] = "it was aborted already"
        elif d is None:
            outcomes[partition] = (
                "its coordinator does not say what became of it; if it is still open, the "
                "coordinator aborts it after transaction.timeout.ms"
            )
        else:
            outcomes[partition] = (
                f"its coordinator holds {d.state} under producer id {d.producer_id}, epoch "
                f"{d.producer_epoch}: a newer producer with its transactional id took over "
                "(which aborted it if it was open)"
            )
    return outcomes


def _abort(sink: SinkOptions, prefix: str, messages: list[Any], what: str) -> None:
    failures = _run(_complete_all(sink, messages, False, what))
    if failures:
        outcomes = _run(_outcomes(sink, messages, {partition for partition, _ in failures}))
        for partition, error in failures:
            log.warning(
                "%s: the transaction of Spark partition %d could not be aborted (%s): %s",
                what,
                partition,
                outcomes.get(partition, "unknown"),
                error,
            )
    _abort_left_open(sink, prefix, messages, frozenset(), what)


def _digest_sum(messages: list[Any]) -> str | None:
    """The digest of a whole write's rows (see :class:`_InputDigest`), whatever its
    partitioning: the sum of its partitions' digests; None if a task took none."""
    rows = total = 0
    for m in messages:
        if not isinstance(m, TransactionalCommitMessage):
            continue
        if m.digest is None:
            return None
        count, _, checksum = m.digest.partition(":")
        rows += int(count)
        total = (total + int(checksum, 16)) % (1 << 64)
    return f"{rows}:{total:016x}"


#: Prepared transactions per group of a commit decision: a group offset's metadata holds
#: 4096 bytes by default (``offset.metadata.max.bytes``); an entry takes at most 42.
_DECISION_CHUNK = 60

#: The states of a transaction that its coordinator committed, and aborted.
_COMMITTED_STATES = ("PrepareCommit", "CompleteCommit")
_ABORTED_STATES = ("PrepareAbort", "CompleteAbort")


def _decision_groups(prefix: str, chunks: int) -> list[str]:
    """The consumer groups that hold a batch write's commit decision: ``<prefix>-commit``
    (the head), then ``<prefix>-commit-1`` on for the prepared transactions."""
    return [f"{prefix}-commit"] + [f"{prefix}-commit-{k}" for k in range(1, chunks + 1)]


#: How many completed writes per topic the record of recovered writes keeps (a rerun of
#: one of them is recognised): 20 entries of about 60 bytes fit a group offset's metadata.
_RECOVERED_KEPT = 20


@dataclass(frozen=True)
class _Decision:
    """A batch write's decision to commit, put on record before its first EndTxn (the
    offset of ``topic``-0 in the groups of :func:`_decision_groups`): the write, the digest
    of its rows, and every prepared transaction to commit (Spark partition, attempt,
    producer id, epoch). ``state``: ``"committing"``, then ``"done"`` once every one is
    committed (by its driver, or by a later one that completed it)."""

    write: str
    rows: str | None
    transactions: list[tuple[int, int, PreparedTransaction]]
    topic: str
    state: str = "committing"

    def chunks(self) -> list[list[list[int]]]:
        entries = [
            [partition, attempt, p.producer_id, p.producer_epoch]
            for partition, attempt, p in self.transactions
        ]
        return [
            entries[start : start + _DECISION_CHUNK]
            for start in range(0, len(entries), _DECISION_CHUNK)
        ]

    def head(self, chunks: int) -> str:
        v2 = any(p.transaction_v2 for _, _, p in self.transactions)
        return json.dumps(
            {
                "write": self.write,
                "state": self.state,
                "rows": self.rows,
                "chunks": chunks,
                "count": len(self.transactions),
                "v2": v2,
            },
            separators=(",", ":"),
        )


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


async def _put_decision(
    sink: SinkOptions,
    prefix: str,
    decision: _Decision,
    recovered: list[dict[str, Any]] | None = None,
) -> None:
    """Put ``decision`` on record, atomically (one transaction of the transactional id
    ``<prefix>-commit``, whose start fences an earlier driver's); with ``recovered``, also
    the list of completed writes to its topic whose reruns are to be recognised (group
    ``<prefix>-recovered``)."""
    group = f"{prefix}-commit"
    chunks = decision.chunks() if decision.state == "committing" else []
    groups = _decision_groups(prefix, len(chunks))
    key = (decision.topic, 0)
    producer = _transactional(sink, group)
    await producer.start()
    try:
        async with producer.transaction():
            for group_k, entries in zip(groups[1:], chunks, strict=True):
                await producer.send_offsets_to_transaction({key: (1, _compact(entries))}, group_k)
            await producer.send_offsets_to_transaction(
                {key: (1, decision.head(len(chunks)))}, group
            )
            if recovered is not None:
                await producer.send_offsets_to_transaction(
                    {key: (1, _compact(recovered[-_RECOVERED_KEPT:]))}, f"{prefix}-recovered"
                )
    finally:
        await producer.close()


async def _put_recovered(
    sink: SinkOptions, prefix: str, topic: str, recovered: list[dict[str, Any]]
) -> None:
    """Put the list of recovered writes to ``topic`` on record (see :func:`_put_decision`)."""
    producer = _transactional(sink, f"{prefix}-commit")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_offsets_to_transaction(
                {(topic, 0): (1, _compact(recovered[-_RECOVERED_KEPT:]))}, f"{prefix}-recovered"
            )
    finally:
        await producer.close()


async def _read_recovered(sink: SinkOptions, prefix: str, topic: str) -> list[dict[str, Any]]:
    """The completed writes to ``topic`` whose reruns are to be recognised."""
    answer = await _fetch_committed(
        f"{prefix}-recovered", [(topic, 0)], config=_completion_config(sink)
    )
    return [e for e in _json_list(answer[(topic, 0)][1]) if isinstance(e, dict)]


async def _settle(sink: SinkOptions, prefix: str) -> None:
    """Start (and close) the producer of ``<prefix>-commit``: a decision's transaction
    that a driver left open is aborted (that driver had not decided), one that is
    committing completes first."""
    producer = _transactional(sink, f"{prefix}-commit")
    await producer.start()
    await producer.close()


async def _decision_of(sink: SinkOptions, prefix: str, topic: str) -> dict[str, Any] | None:
    """The head of the decision on record for ``topic`` (read by name, waiting for an
    open transaction's offsets: a first head still being committed is not missed)."""
    await _settle(sink, prefix)
    answer = await _fetch_committed(
        f"{prefix}-commit", [(topic, 0)], config=_completion_config(sink)
    )
    return _json_object(answer[(topic, 0)][1])


async def _read_decisions(sink: SinkOptions, prefix: str, topic: str | None) -> list[_Decision]:
    """The decisions on record under ``prefix`` still ``"committing"`` (one per topic at
    most), with their transactions: those of every topic, and ``topic``'s read by name.

    Raises:
        IllegalStateError: a decision's transactions cannot all be read back.
    """
    config = _completion_config(sink)
    group = f"{prefix}-commit"
    heads = await _fetch_committed(group, None, config=config)
    if topic is not None:
        heads.update(await _fetch_committed(group, [(topic, 0)], config=config))
    decisions = []
    for (head_topic, partition), (_, text) in sorted(heads.items()):
        head = _json_object(text)
        if partition != 0 or head is None or head.get("state") != "committing":
            continue
        transactions: list[tuple[int, int, PreparedTransaction]] = []
        groups = _decision_groups(prefix, int(head.get("chunks", 0)))[1:]
        answers = await asyncio.gather(
            *(_fetch_committed(g, [(head_topic, 0)], config=config) for g in groups)
        )
        for answer in answers:
            for partition_id, attempt, producer_id, epoch in _json_list(answer[(head_topic, 0)][1]):
                prepared = PreparedTransaction(
                    _transactional_id(prefix, int(partition_id), int(attempt)),
                    int(producer_id),
                    int(epoch),
                    transaction_v2=bool(head.get("v2")),
                )
                transactions.append((int(partition_id), int(attempt), prepared))
        if len(transactions) != int(head.get("count", -1)):
            raise IllegalStateError(
                f"the decision record of an earlier exactly-once write under prefix "
                f"{prefix!r} to topic {head_topic!r} (write {head.get('write')}) names "
                f"{head.get('count')} transactions, of which {len(transactions)} could be read "
                f"back (the groups {prefix}-commit-<n> expired after offsets.retention.minutes, "
                "or were deleted): that write cannot be completed, and this one was not "
                "started. describe_transactions() on its ids tells which of its partitions "
                f"were committed; deleting the consumer group {prefix}-commit lets writes "
                "under the prefix go on"
            )
        decisions.append(
            _Decision(str(head.get("write")), head.get("rows"), transactions, head_topic)
        )
    return decisions


def _outcome(p: PreparedTransaction, d: TransactionDescription | None) -> str:
    """What became of a prepared transaction whose commit just failed, from its
    coordinator's description: ``"committed"``, ``"aborted"`` or ``"unknown"``. Only the
    epoch its own end left tells. Transactions v1: a commit leaves the prepared epoch, an
    abort the prepared epoch or one more (a timeout or a newer producer bumps it).
    Transactions v2: every end bumps it, a commit to one more, an abort to one or two more.
    Anything else (another producer id, a later transaction of the id) is unknown."""
    if d is None or d.producer_id != p.producer_id:
        return "unknown"
    e = p.producer_epoch
    committed, aborted = ((e + 1,), (e + 1, e + 2)) if p.transaction_v2 else ((e,), (e, e + 1))
    if d.state in _COMMITTED_STATES and d.producer_epoch in committed:
        return "committed"
    if d.state in _ABORTED_STATES and d.producer_epoch in aborted:
        return "aborted"
    return "unknown"


async def _complete(sink: SinkOptions, prefix: str, decision: _Decision) -> None:
    """Commit every transaction of ``decision`` (a write whose driver stopped while
    committing) still open, put it on record as ``"done"``, and add it to the recovered
    writes of its topic (a rerun of its rows is then recognised).

    Raises:
        TransactionAbortedError: some could not be committed (aborted after
            ``transaction.timeout.ms``, or the outcome cannot be told); the decision is
            then put on record as done, and the message says what is in Kafka.
        IllegalStateError: some could not be committed now for a reason that may pass
            (the coordinator did not answer): nothing is put on record.
    """
    config = _completion_config(sink)
    log.warning(
        "an earlier exactly-once write under prefix %r (write %s) stopped while committing: "
        "committing the rest of its %d partition transactions",
        prefix,
        decision.write,
        len(decision.transactions),
    )
    results = await _complete_each([p for _, _, p in decision.transactions], True, config)
    failed = {
        partition: (p, result)
        for (partition, _, p), result in zip(decision.transactions, results, strict=True)
        if isinstance(result, BaseException)
    }
    outcomes: dict[int, str] = {}
    if failed:
        try:
            found = await describe_transactions(
                [p.transactional_id for p, _ in failed.values()], config=config
            )
        except KafkaError as exc:
            # A cluster that cannot describe them now (a broker before Kafka 3.0 among
            # them, say) leaves the decision standing: a later run completes it.
            raise _not_completed(prefix, decision, failed, exc) from exc
        for partition, (p, error) in failed.items():
            d = found.get(p.transactional_id)
            if d is not None and d.matches(p):
                # Still open under its epoch: the commit failed for a reason that may pass
                # (the coordinator unreachable); a later run can still complete it.
                raise _not_completed(prefix, decision, failed, error)
            outcomes[partition] = _outcome(p, d)
    not_committed = {p: o for p, o in outcomes.items() if o != "committed"}
    if not not_committed:
        recovered = await _read_recovered(sink, prefix, decision.topic)
        recovered.append({"write": decision.write, "rows": decision.rows})
        await _put_decision(sink, prefix, replace(decision, state="done"), recovered)
        log.warning(
            "the earlier exactly-once write under prefix %r (write %s) is complete: every "
            "one of its %d partition transactions is committed",
            prefix,
            decision.write,
            len(decision.transactions),
        )
        return
    await _put_decision(sink, prefix, replace(decision, state="done"))
    in_kafka = sorted(p for p, _, _ in decision.transactions if p not in not_committed)
    aborted = sorted(p for p, o in not_committed.items() if o == "aborted")
    unknown = sorted(p for p, o in not_committed.items() if o == "unknown")
    raise TransactionAbortedError(
        f"an earlier exactly-once write under prefix {prefix!r} (write {decision.write}) "
        f"stopped while committing and could be completed only in part: the rows of its "
        f"Spark partitions {in_kafka} are in Kafka"
        + (
            f", those of {aborted} are not (aborted: they outlived transaction.timeout.ms)"
            if aborted
            else ""
        )
        + (
            f", and of {unknown} this cluster cannot tell (their transactional ids were "
            "taken over or expired, or the cluster cannot describe transactions)"
            if unknown
            else ""
        )
        + ". This write was not started. Running it again writes all of its rows, those "
        "already in Kafka a second time: write only the rows of the partitions not in "
        "Kafka, if the earlier write's partitioning can be reproduced"
    )


async def _recover(sink: SinkOptions, prefix: str, topic: str | None) -> list[dict[str, Any]]:
    """Complete every batch write under ``prefix`` whose driver stopped while committing
    (:func:`_complete`), whatever its topic; then the completed writes to ``topic`` whose
    reruns are to be recognised (none without a topic)."""
    await _settle(sink, prefix)
    for decision in await _read_decisions(sink, prefix, topic):
        await _complete(sink, prefix, decision)
    return await _read_recovered(sink, prefix, topic) if topic is not None else []


def _not_completed(
    prefix: str,
    decision: _Decision,
    failed: Mapping[int, tuple[PreparedTransaction, BaseException]],
    error: BaseException,
) -> KafkaError:
    return IllegalStateError(
        f"an earlier exactly-once write under prefix {prefix!r} (write {decision.write}) "
        f"stopped while committing, and this run could not complete it: the transactions "
        f"of its Spark partitions {sorted(failed)} could not be committed now ({error}). "
        "This write was not started, lest it abort them: run it again once the cluster "
        "answers (they stay open until transaction.timeout.ms)"
    )


def _json_object(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _json_list(text: str | None) -> list[Any]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


class TransactionalBatchWriter(KafkaBatchWriter):
    """Writes a DataFrame exactly once (``delivery.guarantee`` ``exactly_once``): each task
    prepares a transaction, the driver commits them all (see the module).

    With a ``transactional.id.prefix``, a write first completes every earlier write under
    the prefix whose driver stopped while committing. With a ``topic`` or
    ``transactional.marker.topic`` too, the driver puts its decision to commit on record
    before committing, and a write whose rows are those of a write completed that way is
    not written again."""

    def __init__(self, sink: SinkOptions, layout: _Layout) -> None:
        super().__init__(sink, layout)
        # One prefix per write, made on the driver (the tasks get it pickled).
        self.prefix = sink.transactional_id_prefix or f"aioproducer-spark-{uuid.uuid4().hex}"
        self.decision_topic = (
            (sink.marker_topic or sink.topic) if sink.transactional_id_prefix else None
        )
        self.write_id = uuid.uuid4().hex
        # The completed writes to the topic whose reruns are recognised (see recover()).
        self.recovered: list[dict[str, Any]] = []

    def recover(self) -> None:
        """Complete every earlier write under this write's ``transactional.id.prefix``
        whose driver stopped while committing (on the driver, before any task starts: a
        task's producer would abort the transactions it left open). Does nothing without a
        prefix given.

        Raises:
            TransactionAbortedError: such a write could be completed only in part (the
                message says which partitions are in Kafka); this one must not start.
            IllegalStateError: such a write could not be completed now; this one must not
                start.
        """
        if self.sink.transactional_id_prefix:
            self.recovered = _run(_recover(self.sink, self.prefix, self.decision_topic))

    def check_cluster(self) -> None:
        """Refuse a cluster older than Kafka 3.0 before any task starts (see the module).

        Raises:
            UnsupportedVersionError: its brokers cannot list or describe transactions.
        """
        _run(_check_cluster(self.sink))

    def write(self, iterator: Iterator[Any]) -> TransactionalCommitMessage:
        """Send the partition's rows in a transaction and prepare it.

        Raises:
            KafkaError: a record was not delivered (the task fails; its transaction is
                aborted).
        """
        partition = _partition_id()
        attempt = _attempt_number()
        digest = _InputDigest() if self.decision_topic is not None else None
        prepared, records, _ = _run(
            _produce_prepared(
                self.sink,
                self.layout,
                _chunks(self.layout, iterator),
                _transactional_id(self.prefix, partition, attempt),
                None,
                digest,
            )
        )
        return TransactionalCommitMessage(
            partition,
            records,
            prepared,
            attempt=attempt,
            digest=str(digest) if digest is not None else None,
        )

    def decision(self, messages: list[Any]) -> _Decision:
        """What the driver puts on record before committing ``messages``."""
        assert self.decision_topic is not None
        return _Decision(
            self.write_id,
            _digest_sum(messages),
            [
                (m.partition_id, m.attempt, m.prepared)
                for m in messages
                if isinstance(m, TransactionalCommitMessage)
                and m.prepared is not None
                and not m.prepared.empty
            ],
            self.decision_topic,
        )

    def commit(self, messages: list[Any]) -> None:
        """Commit every task's transaction.

        Raises:
            KafkaError: a transaction could not be committed (for example, it stayed open
                longer than ``transaction.timeout.ms`` and the coordinator aborted it).
        """
        what = "the exactly-once write"
        topic = self.decision_topic
        if topic is None:
            _commit(self.sink, self.prefix, messages, what)
            return
        rows = _digest_sum(messages)
        rerun = next(
            (r for r in self.recovered if rows is not None and r.get("rows") == rows), None
        )
        if rerun is not None:
            log.warning(
                "%s: its rows (rows:digest %s) are those of the earlier write %s, which "
                "stopped while committing and was completed since: not writing them twice",
                what,
                rows,
                rerun.get("write"),
            )
            _abort(self.sink, self.prefix, messages, f"{what}, written already")
            rest = [r for r in self.recovered if r is not rerun]
            try:
                _run(_put_recovered(self.sink, self.prefix, topic, rest))
            except KafkaError as exc:
                log.warning("%s: could not take the earlier write off the record: %s", what, exc)
            return
        decision = self.decision(messages)
        sink, prefix, write = self.sink, self.prefix, self.write_id

        async def put(state: str) -> None:
            try:
                await _put_decision(sink, prefix, replace(decision, state=state))
            except KafkaError as exc:
                # The put may have been committed though its answer was lost: what the
                # record says (once settled) is the decision.
                head = await _decision_of(sink, prefix, topic)
                if head is None or head.get("write") != write or head.get("state") != state:
                    raise
                log.warning("%s: the decision record says %r after all (%s)", what, state, exc)

        _commit(self.sink, self.prefix, messages, what, before=put)

    def abort(self, messages: list[Any]) -> None:
        """Abort every task's transaction: nothing of the write is committed, unless the
        driver had put its decision to commit on record (the commit failed part-way): the
        transactions are then left for the next write under the prefix to complete."""
        what = "the failed exactly-once write"
        topic = self.decision_topic
        if topic is not None:
            try:
                head = _run(_decision_of(self.sink, self.prefix, topic))
            except KafkaError as exc:
                log.warning(
                    "%s: could not read the decision record, so its transactions are left "
                    "open (the coordinator aborts them after transaction.timeout.ms, or the "
                    "next write under prefix %r completes them if they were decided): %s",
                    what,
                    self.prefix,
                    exc,
                )
                return
            if head is not None and head.get("write") == self.write_id:
                log.warning(
                    "%s: its decision to commit is on record; its transactions not committed "
                    "yet are left for the next write under prefix %r to commit",
                    what,
                    self.prefix,
                )
                return
        _abort(self.sink, self.prefix, messages, what)


class TransactionalStreamWriter(KafkaStreamWriter):
    """Writes each micro-batch exactly once (``delivery.guarantee`` ``exactly_once``),
    replays included (see the module)."""

    def __init__(self, sink: SinkOptions, layout: _Layout) -> None:
        super().__init__(sink, layout)
        marker = sink.marker_topic or sink.topic
        if marker is None:
            raise ConfigurationError(
                "a streaming query with delivery.guarantee exactly_once records each "
                "micro-batch in a consumer group's offset for partition 0 of a topic: set "
                "the 'topic' option, or 'transactional.marker.topic' when rows name their "
                "topic"
            )
        # None: each task derives it from the query's id (see _derived_prefix).
        self.prefix = sink.transactional_id_prefix
        self.marker_topic = marker


    def write(self, iterator: Iterator[Any]) -> TransactionalCommitMessage:
        """Send the partition's rows of the micro-batch in a transaction, with its marker,
        and prepare it; a micro-batch this partition committed already is skipped."""
        context = _task_context()
        batch = context.getLocalProperty(_BATCH_ID_PROPERTY) if context is not None else None
        query_id = context.getLocalProperty(_QUERY_ID_PROPERTY) if context is not None else None
        if batch is None or query_id is None:
            raise ConfigurationError(
                f"no micro-batch or query id in the task (Spark local properties "
                f"{_BATCH_ID_PROPERTY}, {_QUERY_ID_PROPERTY}); exactly once needs a "
                "micro-batch trigger, not continuous processing"
            )
        prefix = self.prefix or _derived_prefix(query_id)
        partition = _partition_id()
        attempt = _attempt_number()
        # One marker group per Spark partition, whatever the attempt.
        marker = _Marker(f"{prefix}-{partition}", self.marker_topic, int(batch) + 1, query_id)
        digest = _InputDigest()
        prepared, records, already = _run(
            _produce_prepared(
                self.sink,
                self.layout,
                _chunks(self.layout, iterator),
                _transactional_id(prefix, partition, attempt),
                marker,
                digest,
            )
        )
        return TransactionalCommitMessage(
            partition, records, prepared, already, attempt, prefix, query_id, str(digest)
        )

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Commit every task's transaction of the micro-batch, once the batch's layout is
        on record (see :func:`_record_batch`).

        Raises:
            KafkaError: a transaction could not be committed: the micro-batch fails, and
                runs again when the query restarts (partitions committed already are not
                written twice).
            IllegalStateError: the micro-batch is a replay split into partitions otherwise
                than the run that began committing it: nothing is committed.
        """
        prefix, query_id = _query_of(messages, self.prefix)
        what = f"micro-batch {batchId}"
        if prefix is None or query_id is None:
            return
        try:
            _run(_record_batch(self.sink, prefix, self.marker_topic, query_id, batchId, messages))
        except BaseException:
            _abort(self.sink, prefix, messages, f"{what}, refused")
            raise
        _commit(self.sink, prefix, messages, what)

    def abort(self, messages: list[Any], batchId: int) -> None:
        """Abort every task's transaction of the failed micro-batch."""
        prefix, _ = _query_of(messages, self.prefix)
        if prefix is None:
            return  # no task got as far as its transactional id
        _abort(self.sink, prefix, messages, f"the failed micro-batch {batchId}")


def _query_of(messages: list[Any], prefix: str | None) -> tuple[str | None, str | None]:
    """The prefix and query id the tasks of a micro-batch used."""
    query_id = None
    for message in messages:
        if isinstance(message, TransactionalCommitMessage) and message.query_id is not None:
            query_id = message.query_id
            prefix = prefix or message.prefix
            break
    return prefix, query_id


def _layout(messages: list[Any]) -> str:
    """The partitions of a micro-batch and the digest of each one's rows, in one string."""
    parts = sorted(
        (m.partition_id, m.digest or "")
        for m in messages
        if isinstance(m, TransactionalCommitMessage)
    )
    text = ";".join(f"{partition}={digest}" for partition, digest in parts)
    return f"{len(parts)}:{hashlib.sha256(text.encode()).hexdigest()[:32]}"


async def _record_batch(
    sink: SinkOptions,
    prefix: str,
    topic: str,
    query_id: str,
    batch: int,
    messages: list[Any],
) -> None:
    """Before the first transaction of a micro-batch is committed, put on record (the
    offset ``batch + 1`` of ``topic``-0 in group ``<prefix>-batches``, committed in a
    transaction of its own) how the micro-batch was split: how many partitions, and the
    digest of each one's rows. A replay of a micro-batch found on record must be split the
    same way if the run that recorded it committed any partition of it, or nothing of it
    is committed: markers are per partition (a replay with fewer partitions would never
    consult the markers of the others). If that run committed none, the replay's layout
    replaces the record."""
    group = f"{prefix}-batches"
    layout = _layout(messages)
    # Started first: it aborts a record's transaction that a crashed driver left open.
    producer = _transactional(sink, group)
    await producer.start()
    try:
        config = producer.config
        committed = await _fetch_committed(group, [(topic, 0)], config=config)
        offset, metadata = committed[(topic, 0)]
        recorded = _read_metadata(metadata, query_id)
        if recorded is not None and offset == batch + 1:
            if recorded.get("layout") == layout:
                return
            earlier = str(recorded.get("layout"))
            now = sum(1 for m in messages if isinstance(m, TransactionalCommitMessage))
            if await _any_partition_committed(prefix, topic, query_id, batch, earlier, now, config):
                raise IllegalStateError(
                    f"micro-batch {batch} is replayed split into partitions otherwise than "
                    f"the run that began committing it (partitions:digest {layout} now, "
                    f"{earlier} then), and part of it was committed: writing it again could "
                    "lose rows or write them twice. Nothing of it was committed now: "
                    "restart the query with the partitioning of the earlier run (the same "
                    "spark.default.parallelism, cores and source options)"
                )
            log.info(
                "micro-batch %d: the run that recorded it committed none of it; recording "
                "the replay's partitions instead",
                batch,
            )
        record = json.dumps(
            {"query": query_id, "batch": batch, "layout": layout}, separators=(",", ":")
        )
        async with producer.transaction():
            await producer.send_offsets_to_transaction({(topic, 0): (batch + 1, record)}, group)
    finally:
        await producer.close()


async def _any_partition_committed(
    prefix: str,
    topic: str,
    query_id: str,
    batch: int,
    earlier: str,
    partitions_now: int,
    config: ProducerConfig,
) -> bool:
    """Whether the run that recorded micro-batch ``batch`` (split as ``earlier``)
    committed any partition of it: a marker of this query for ``batch`` or later.

    The replay's own tasks prepared transactions that hold offsets of the marker groups of
    its partitions: those groups are read without waiting for open transactions (each of
    those tasks waited for the earlier run's before it began). The others, partitions the
    replay does not have, wait for any transaction of the earlier run still completing."""
    count_text = earlier.split(":", 1)[0]
    count = int(count_text) if count_text.isdigit() else 0

    async def committed(partition: int) -> bool:
        answer = await _fetch_committed(
            f"{prefix}-{partition}",
            [(topic, 0)],
            config=config,
            require_stable=partition >= partitions_now,
        )
        offset, metadata = answer[(topic, 0)]
        return _read_metadata(metadata, query_id) is not None and offset >= batch + 1

    found = await asyncio.gather(*(committed(partition) for partition in range(count)))
    return any(found)
