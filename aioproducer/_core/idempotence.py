"""Producer id, epoch and per-partition sequence numbers: the idempotent producer.

The broker deduplicates and orders batches by (producer id, epoch, partition, sequence). This
module decides which sequence a batch gets when it is drained, which retried batch may go out
next so the broker never sees a gap, and when the producer id must be reset (or its epoch
bumped) because a sequence was lost for good. :mod:`aioproducer._core.transactions` builds
the transaction state machine on it.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from dataclasses import dataclass, field
from typing import Final

from aioproducer._core.accumulator import SEQUENCE_MODULO, ProducerBatch
from aioproducer.errors import KafkaError, error_for_code
from aioproducer.protocol.error_codes import ErrorCode

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "IdempotenceManager",
    "PartitionSequenceState",
    "SequenceVerdict",
    "init_producer_id_error",
]

# Epoch bumps and producer id resets are logged with the transaction state changes.
log = logging.getLogger("aioproducer.transactions")

TopicPartition = tuple[str, int]

#: The highest producer epoch; past it a producer needs a new producer id.
MAX_PRODUCER_EPOCH: Final = 32767


def init_producer_id_error(code: int) -> KafkaError:
    """The error for an idempotent producer's InitProducerId answered with ``code``."""
    message = "InitProducerId"
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        # Kafka lets an idempotent producer in with WRITE on any topic (KIP-679) or
        # IdempotentWrite on the cluster.
        message = (
            "InitProducerId: an idempotent producer's principal needs WRITE on a topic "
            "(or IDEMPOTENT_WRITE on the cluster); grant it, or set enable_idempotence=False"
        )
    return error_for_code(code, message)


@dataclass(slots=True)
class PartitionSequenceState:
    """Sequence bookkeeping for one partition (the Java client's ``TxnPartitionEntry``)."""

    # The producer id and epoch this partition's sequences belong to. Behind the current ones
    # after an epoch bump (or a new id) until the partition's batches of the old ones are done.
    producer_id: int = -1
    producer_epoch: int = -1
    next_sequence: int = 0
    # The highest sequence the broker acknowledged (never lowered by a late answer).
    last_acked_sequence: int = -1
    # The offset of the last record acknowledged, for UNKNOWN_PRODUCER_ID (Java's canRetry).
    last_acked_offset: int = -1
    # Batches with a sequence that are not done (sent, or queued again for a retry), in
    # sequence order.
    in_flight: list[ProducerBatch] = field(default_factory=list)
    # Batches with a sequence queued to go again (retries, parts of a split batch): new
    # batches wait behind them. A batch leaves when drained or when it fails.
    retrying: set[ProducerBatch] = field(default_factory=set)
    # The last sequence of a retried batch that expired: whether the broker has it is unknown
    # until the partition's other batches resolve (Java's partitionsWithUnresolvedSequences).
    unresolved_sequence: int | None = None
    # Produce requests out with a batch of the partition (of any epoch; a batch that expired
    # in flight counts until its request ends), and the broker they went to: a partition's
    # attempts are out at one broker at a time (see IdempotenceManager.may_drain).
    outstanding: int = 0
    outstanding_node: int = -1


class SequenceVerdict(enum.Enum):
    """What becomes of a batch the broker refused with a sequence error
    (:meth:`IdempotenceManager.can_retry`)."""

    RETRY = "retry"
    """Send it again (after the batches before it, or under a bumped epoch)."""
    FAIL = "fail"
    """Fail it with the broker's error."""
    OVERTAKEN = "overtaken"
    """Fail it as :class:`~aioproducer.errors.BatchOvertakenError`: the broker's sequence
    moved past it, so it may or may not be in the log, and sending it again could write it
    twice or after later records."""


def _sequence_after(sequence: int, count: int) -> int:
    """``sequence`` advanced by ``count``; sequences wrap at 2**31, as Kafka's."""
    return (sequence + count) % SEQUENCE_MODULO


def _last_sequence(batch: ProducerBatch) -> int:
    """The sequence of ``batch``'s last record."""
    return _sequence_after(batch.base_sequence, batch.record_count - 1)


def _counts_in(state: PartitionSequenceState, batch: ProducerBatch) -> bool:
    """Whether ``batch`` was sent under the producer id and epoch ``state``'s sequences
    run under now (an older one's outcome says nothing of them)."""
    return (batch.producer_id, batch.producer_epoch) == (state.producer_id, state.producer_epoch)


def _mark_unresolved(state: PartitionSequenceState, batch: ProducerBatch) -> None:
    """Whether the broker has ``batch`` is unknown until the partition's other batches tell
    (Java's ``markSequenceUnresolved``); the highest such sequence is kept."""
    last = _last_sequence(batch)
    unresolved = state.unresolved_sequence
    if unresolved is None or _is_later(last, unresolved):
        state.unresolved_sequence = last


def _is_later(sequence: int, than: int) -> bool:
    """Whether ``sequence`` comes after ``than`` (with the wrap at 2**31)."""
    if than < 0:
        return sequence >= 0
    distance = (sequence - than) % SEQUENCE_MODULO
    return 0 < distance < SEQUENCE_MODULO // 2


class IdempotenceManager:
    """Producer id, epoch and sequences for an idempotent producer.

    As the Java client's ``TransactionManager`` for an idempotent producer: every partition
    keeps its own sequences under the producer id and epoch it started them with. A lost
    sequence on one partition (a batch that failed for good, a gap the broker reports) bumps
    the epoch here, locally, and restarts only that partition's sequences; batches of other
    partitions keep their id, epoch and sequence, so a retry the broker already wrote is
    recognised as a duplicate. A new producer id is asked for only at the start and when
    the epoch runs out.
    """

    def __init__(self, transactional_id: str | None = None) -> None:
        self.transactional_id = transactional_id
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitions: dict[TopicPartition, PartitionSequenceState] = {}
        self.needs_producer_id = True
        self.init_in_flight = False
        self._local_bump_required = False
        self._partitions_to_rewrite: set[TopicPartition] = set()
        # Whether the epoch was bumped locally since the producer id was last set, and
        # whether a broker refused such an epoch (then bumps take a new producer id).
        self._bumped_locally = False
        self._local_bumps_refused = False

    @property
    def has_producer_id(self) -> bool:
        """True once InitProducerId succeeded and no reset is pending."""
        return self.producer_id >= 0 and not self.needs_producer_id

    @property
    def produce_version_cap(self) -> int | None:
        """The highest Produce version to send, None for no limit below the client's own."""
        return None

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """Install the producer id and epoch InitProducerId returned.

        Partitions move to it as their batches of the old one are done (see :meth:`prepare`);
        one whose sequences had to be rewritten starts again at sequence 0 in
        :meth:`restart_partitions`.
        """
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.needs_producer_id = False
        self.init_in_flight = False
        self._bumped_locally = False
        # A new id is a new epoch too: a bump still asked for is not needed.
        self._local_bump_required = False

    def reset_sequences(self) -> None:
        """Forget every partition's sequences (a transactional producer's new epoch: the
        batches of the old one were aborted)."""
        partitions = self._partitions
        self._partitions = {}
        for tp, state in partitions.items():
            for batch in state.in_flight:
                batch.base_sequence = -1
            if state.outstanding:
                # Its requests still count where they went (see may_drain).
                self._partitions[tp] = PartitionSequenceState(
                    outstanding=state.outstanding, outstanding_node=state.outstanding_node
                )
        self._partitions_to_rewrite.clear()
        self._local_bump_required = False

    def request_epoch_bump(self, tp: TopicPartition, reason: str) -> None:
        """``tp`` lost a sequence for good: bump the epoch and start ``tp`` again at 0
        (Java's ``requestIdempotentEpochBumpForPartition``); done by
        :meth:`bump_epoch_if_needed` at the sender's next step."""
        if tp not in self._partitions_to_rewrite:
            log.warning(
                "bumping the epoch of idempotent producer id %d (epoch %d) to restart the "
                "sequences of %s-%d: %s",
                self.producer_id,
                self.producer_epoch,
                tp[0],
                tp[1],
                reason,
            )
        self._partitions_to_rewrite.add(tp)
        self._local_bump_required = True

    def bump_epoch_if_needed(self) -> None:
        """Bump the epoch locally if a partition asked for it (Java's
        ``bumpIdempotentProducerEpoch``); an exhausted epoch asks for a new producer id.
        The partitions that asked restart in :meth:`restart_partitions`."""
        if not self._local_bump_required or self.needs_producer_id:
            return
        self._local_bump_required = False
        if (
            self.producer_id < 0
            or self.producer_epoch >= MAX_PRODUCER_EPOCH
            or self._local_bumps_refused
        ):
            # A new id; the partitions to rewrite start over once it arrives.
            self.needs_producer_id = True
            return
        self._bumped_locally = True
        self.producer_epoch += 1
        log.info("producer id %d: epoch bumped to %d", self.producer_id, self.producer_epoch)

    def restart_partitions(self) -> list[ProducerBatch]:
        """Restart the sequences of the partitions that asked for it (an epoch bump or a new
        producer id came since), each once no request with a batch of it is out.

        Unlike Java, which restarts them at once: a batch given a new sequence while its old
        attempt may still be written would be in the log twice. Returns the batches that
        cannot be sent again (see :meth:`_start_sequences_at_beginning`): the caller fails
        them as overtaken.
        """
        if not self._partitions_to_rewrite or self.needs_producer_id or self._local_bump_required:
            return []
        stranded: list[ProducerBatch] = []
        for tp in list(self._partitions_to_rewrite):
            state = self._partitions.get(tp)
            if state is not None and state.outstanding:
                continue
            self._partitions_to_rewrite.discard(tp)
            stranded.extend(self._start_sequences_at_beginning(tp))
        return stranded

    def _start_sequences_at_beginning(
        self, tp: TopicPartition, *, strand: bool = True
    ) -> list[ProducerBatch]:
        """Give ``tp``'s unfinished batches the current id and epoch and sequences from 0,
        in their order (Java's ``TxnPartitionEntry.startSequencesAtBeginning``).

        A batch an earlier attempt of which may have been written (``maybe_written``) is
        left out and returned: under the new epoch the broker could not recognise it as a
        duplicate. Java restarts it too, and may write it twice. ``strand`` False restarts
        every batch (the same epoch, after the broker forgot the producer).
        """
        state = self._state(tp)
        sequence = 0
        stranded = [batch for batch in state.in_flight if strand and batch.maybe_written]
        if stranded:
            state.in_flight = [batch for batch in state.in_flight if not batch.maybe_written]
            for batch in stranded:
                state.retrying.discard(batch)
        for batch in state.in_flight:
            batch.producer_id = self.producer_id
            batch.producer_epoch = self.producer_epoch
            batch.base_sequence = sequence
            batch.sequence_reset = True
            sequence = _sequence_after(sequence, batch.record_count)
        state.producer_id = self.producer_id
        state.producer_epoch = self.producer_epoch
        state.next_sequence = sequence
        state.last_acked_sequence = -1
        state.unresolved_sequence = None
        return stranded

    def _state(self, tp: TopicPartition) -> PartitionSequenceState:
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = PartitionSequenceState()
        return state

    def _is_stale(self, state: PartitionSequenceState) -> bool:
        return state.producer_id != self.producer_id or state.producer_epoch != self.producer_epoch

    def may_drain(self, batch: ProducerBatch, node: int) -> bool:
        """Whether the head batch of its partition may go out now to broker ``node`` without
        breaking order (Java's ``RecordAccumulator.shouldStopDrainBatchesForPartition``,
        with two rules Java lacks, below)."""
        if self.needs_producer_id:
            return False
        tp = batch.tp
        state = self._partitions.get(tp)
        if state is None:
            return True
        if state.outstanding and state.outstanding_node != node:
            # Nothing goes to a new leader while an attempt of the partition is out at the
            # old one: the old leader may still write it, and a batch written first at the
            # new one would overtake it (Kafka keeps the last five batches per producer, so
            # enough of those and a retry of it is no longer recognised as a duplicate).
            return False
        if tp in self._partitions_to_rewrite:
            # Its sequences restart under a new epoch once its requests are answered.
            return False
        if batch.has_sequence:
            # A retry goes out only as the oldest unacknowledged batch of its partition.
            return bool(state.in_flight) and state.in_flight[0] is batch
        # New batches wait while an older one of the partition is being retried, while
        # batches under an older id or epoch are still out (a new batch would start the
        # new epoch at 0 before them), and while a sequence is unresolved.
        if state.retrying or state.unresolved_sequence is not None:
            return False
        out = bool(state.in_flight) or state.outstanding > 0
        if out and self._is_stale(state):
            return False
        # Until the broker acknowledged a batch of the partition under this id and epoch,
        # one batch at a time: a leader that holds no state for the producer takes any
        # sequence, so a second batch written before a refused first one would leave the
        # first unable ever to be written in order.
        return not (out and state.last_acked_sequence < 0)

    def attempt_sent(self, batch: ProducerBatch, node: int) -> None:
        """A Produce request with ``batch`` went to broker ``node``."""
        state = self._state(batch.tp)
        state.outstanding += 1
        state.outstanding_node = node

    def attempt_ended(self, batch: ProducerBatch) -> None:
        """The request that took ``batch`` was answered, failed or abandoned."""
        state = self._partitions.get(batch.tp)
        if state is not None and state.outstanding > 0:
            state.outstanding -= 1

    def prepare(self, batch: ProducerBatch) -> None:
        """Give a drained batch its producer id, epoch and sequence, and close it.

        A batch that has a sequence (a retry, or a part of a split batch) keeps its own;
        a new batch takes the partition's next one, under the current id and epoch.
        """
        transactional = self.transactional_id is not None
        if batch.has_sequence:
            state = self._state(batch.tp)
            state.retrying.discard(batch)
            # A retry keeps its bytes unless its sequence was reset.
            batch.builder.seal(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                transactional,
                restamp=batch.sequence_reset,
            )
            return
        state = self._state(batch.tp)
        if self._is_stale(state) and not state.in_flight:
            # Everything sent under the old id or epoch is done: start again at 0.
            self._start_sequences_at_beginning(batch.tp)
        base_sequence = state.next_sequence
        # Built first: a batch that cannot be built (and fails) takes no sequence numbers,
        # so the partition's sequence has no gap.
        batch.builder.seal(
            state.producer_id, state.producer_epoch, base_sequence, transactional, restamp=True
        )
        batch.base_sequence = base_sequence
        batch.producer_id = state.producer_id
        batch.producer_epoch = state.producer_epoch
        batch.transactional = transactional
        state.next_sequence = _sequence_after(base_sequence, batch.record_count)
        state.in_flight.append(batch)

    def mark_retrying(self, batch: ProducerBatch) -> None:
        """A sequenced batch goes back to the accumulator to be sent again."""
        if batch.has_sequence:
            self._state(batch.tp).retrying.add(batch)

    def is_next_in_line(self, batch: ProducerBatch) -> bool:
        """True when every batch before this one of its partition was acknowledged."""
        state = self._partitions.get(batch.tp)
        if state is None:
            return True
        return batch.base_sequence == _sequence_after(state.last_acked_sequence, 1)

    def can_retry(self, batch: ProducerBatch, code: int, log_start_offset: int) -> SequenceVerdict:
        """What becomes of a batch the broker answered OUT_OF_ORDER_SEQUENCE_NUMBER or
        UNKNOWN_PRODUCER_ID; asks for an epoch bump where the broker truly lost a sequence
        (Java's ``TransactionManager.canRetry``)."""
        tp = batch.tp
        state = self._state(tp)
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            if log_start_offset < 0:
                # The broker did not know its log start offset yet: ask again.
                return SequenceVerdict.RETRY
            if batch.sequence_reset:
                # The head of the partition failed this way already and its batches were
                # restarted from 0: this is one of those coming back.
                return SequenceVerdict.RETRY
            if state.last_acked_offset < log_start_offset:
                # Retention removed the records the broker kept our sequence by.
                self._sequences_lost(tp, "the broker removed the records it knew the producer by")
                return SequenceVerdict.RETRY
            self.request_epoch_bump(tp, "the broker lost the producer's state")
            return SequenceVerdict.RETRY
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            unresolved = state.unresolved_sequence
            if unresolved is None and not batch.sequence_reset and self._passed_over(state, batch):
                # The broker acknowledged later batches of the partition and refuses this
                # one. Either they overtook it (a leader without state for the producer took
                # them first: may_drain keeps that from happening) or the broker wrote it and
                # no longer remembers it (it keeps the last five batches per producer, and
                # one after loading a snapshot). Resending could write it twice, or after
                # the later ones: it fails, and the partition restarts under a new epoch.
                self.request_epoch_bump(
                    tp, "the broker acknowledged later batches of the partition than one it refused"
                )
                return SequenceVerdict.OVERTAKEN
            if unresolved is None and (batch.sequence_reset or not self.is_next_in_line(batch)):
                # An earlier batch of the partition failed or is being retried.
                return SequenceVerdict.RETRY
            if unresolved is None or batch.base_sequence == _sequence_after(unresolved, 1):
                # A real gap: start the partition again under a bumped epoch.
                self.request_epoch_bump(tp, "the broker reported a sequence gap")
                if batch.maybe_written:
                    # The broker's sequence is not where this batch would continue it, and
                    # an earlier attempt of it may have been written (its state lost since,
                    # say): under a new epoch it would be written again.
                    return SequenceVerdict.OVERTAKEN
            return SequenceVerdict.RETRY
        return SequenceVerdict.FAIL

    def _passed_over(self, state: PartitionSequenceState, batch: ProducerBatch) -> bool:
        """Whether ``batch``, under the partition's current id and epoch, lies wholly before
        the last sequence the broker acknowledged."""
        if state.last_acked_sequence < 0 or self._is_stale(state):
            return False
        if not _counts_in(state, batch):
            return False
        return _is_later(state.last_acked_sequence, _last_sequence(batch))

    def local_bump_refused(self, batch: ProducerBatch, error_name: str) -> bool:
        """Whether a broker's PRODUCER_FENCED / INVALID_PRODUCER_EPOCH answer to ``batch``
        refuses an epoch this producer bumped itself: Kafka takes such epochs, but some
        brokers (Tansu) fence them. Then this and later bumps take a new producer id
        instead, and the batch goes again under it (True)."""
        if not (
            self._bumped_locally
            and batch.producer_id == self.producer_id
            and batch.producer_epoch == self.producer_epoch
        ):
            return False
        if not self._local_bumps_refused:
            log.warning(
                "the broker refused the locally bumped epoch %d of producer id %d (%s); "
                "asking for a new producer id instead, now and at every later bump",
                self.producer_epoch,
                self.producer_id,
                error_name,
            )
        self._local_bumps_refused = True
        self._partitions_to_rewrite.add(batch.tp)
        self.needs_producer_id = True
        return True

    def _sequences_lost(self, tp: TopicPartition, reason: str) -> None:
        # The idempotent producer bumps the epoch (never reusing a sequence under one epoch).
        self.request_epoch_bump(tp, reason)

    def on_success(self, batch: ProducerBatch, base_offset: int = -1) -> None:
        """The broker stored the batch (also when the answer came after the batch expired:
        its sequence is then resolved, as Java's ``completeBatch`` does)."""
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        if not _counts_in(state, batch):
            # Of an older epoch or id than the partition's sequences now: says nothing of them.
            with contextlib.suppress(ValueError):
                state.in_flight.remove(batch)
            return
        last = _last_sequence(batch)
        if _is_later(last, state.last_acked_sequence):
            state.last_acked_sequence = last
        if base_offset >= 0:
            state.last_acked_offset = max(
                state.last_acked_offset, base_offset + batch.record_count - 1
            )
        with contextlib.suppress(ValueError):
            state.in_flight.remove(batch)

    def on_final_failure(self, batch: ProducerBatch, reason: str, *, answered: bool = True) -> None:
        """A sequenced batch failed for good.

        ``answered``: the broker refused it (it was not written), so the partition's later
        sequences no longer follow on: the partition starts again (Java's
        ``handleFailedBatch`` with ``adjustSequenceNumbers``). A batch that expired instead
        (``answered`` False) may or may not be in the log: its sequence stays unresolved
        until the partition's other batches tell (:meth:`maybe_resolve_sequences`).
        """
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        # A batch that expired (or was aborted) while queued to go again: the batches
        # behind it no longer wait for it.
        state.retrying.discard(batch)
        try:
            state.in_flight.remove(batch)
        except ValueError:
            return
        if not answered:
            # Unresolved even when the batch never went out itself (a split part queued
            # behind its sibling, a request purged before its answer): its sequence range is
            # taken, and later batches wait until the partition's requests tell whether the
            # range is closed (a later batch acknowledged) or a gap (the epoch is bumped).
            _mark_unresolved(state, batch)
            return
        self._sequences_lost(batch.tp, f"batch {batch.topic}-{batch.partition} failed: {reason}")

    def on_late_failure(self, batch: ProducerBatch) -> None:
        """The request of a batch that had expired in flight ended without its being
        written, or without saying: its sequence is unresolved until the partition's other
        batches tell (as Java's ``markSequenceUnresolved``)."""
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        if not _counts_in(state, batch):
            return
        if _is_later(_last_sequence(batch), state.last_acked_sequence):
            _mark_unresolved(state, batch)

    def maybe_resolve_sequences(self) -> None:
        """Settle the partitions whose sequence was left unresolved by an expired batch, once
        nothing of theirs is out (Java's ``maybeResolveSequences``)."""
        for tp, state in self._partitions.items():
            if state.unresolved_sequence is None or state.in_flight or state.outstanding:
                # Also while a request of an expired batch is out: its answer may settle it.
                continue
            if state.next_sequence == _sequence_after(state.last_acked_sequence, 1):
                # A later batch was acknowledged: the broker has every sequence before it.
                state.unresolved_sequence = None
                continue
            state.unresolved_sequence = None
            self._sequences_lost(tp, "batches expired and whether the broker has them is unknown")

    def split(self, batch: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """``batch`` was split into ``parts``, which carry its sequence range in order
        (:meth:`RecordAccumulator.split_and_reenqueue`): they take its place among the
        partition's unfinished batches (Java's ``splitAndReenqueue``)."""
        if not batch.has_sequence:
            return
        state = self._state(batch.tp)
        try:
            index = state.in_flight.index(batch)
        except ValueError:
            index = len(state.in_flight)
        else:
            del state.in_flight[index]
        state.in_flight[index:index] = parts
        # Drained like retries: each in its turn, as the oldest of the partition.
        state.retrying.discard(batch)
        state.retrying.update(parts)
