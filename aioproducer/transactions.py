"""Producer id, epoch and per-partition sequence numbers (idempotence).

The broker deduplicates and orders batches by (producer id, epoch, partition, sequence). This
module decides which sequence a batch gets when it is drained, which retried batch may go out
next so the broker never sees a gap, and when the producer id must be reset because a sequence
was lost for good.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from aioproducer.accumulator import ProducerBatch

__all__ = ["IdempotenceManager", "PartitionSequenceState"]

log = logging.getLogger("aioproducer.transactions")

TopicPartition = tuple[str, int]

_SEQUENCE_MODULO = 1 << 31


@dataclass(slots=True)
class PartitionSequenceState:
    """Sequence bookkeeping for one partition."""

    next_sequence: int = 0
    last_acked_sequence: int = -1
    # Batches with a sequence that went out and are not done, in sequence order.
    in_flight: list[ProducerBatch] = field(default_factory=list)
    retrying: int = 0


class IdempotenceManager:
    """Producer id, epoch and sequences for an idempotent producer."""

    def __init__(self, transactional_id: str | None = None) -> None:
        self.transactional_id = transactional_id
        self.producer_id = -1
        self.producer_epoch = -1
        self._partitions: dict[TopicPartition, PartitionSequenceState] = {}
        self.needs_producer_id = True
        self.init_in_flight = False

    @property
    def has_producer_id(self) -> bool:
        """True once InitProducerId succeeded and no reset is pending."""
        return self.producer_id >= 0 and not self.needs_producer_id

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """Install a new producer id and epoch; every partition starts again at sequence 0."""
        if producer_id != self.producer_id or producer_epoch != self.producer_epoch:
            for state in self._partitions.values():
                state.next_sequence = 0
                state.last_acked_sequence = -1
                for batch in state.in_flight:
                    batch.base_sequence = -1
                state.in_flight.clear()
                state.retrying = 0
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.needs_producer_id = False
        self.init_in_flight = False

    def request_reset(self, reason: str) -> None:
        """A sequence was lost for good: get a new producer id before sending more."""
        if not self.needs_producer_id:
            log.warning(
                "resetting the idempotent producer id %d (epoch %d): %s",
                self.producer_id,
                self.producer_epoch,
                reason,
            )
        self.needs_producer_id = True

    def _state(self, tp: TopicPartition) -> PartitionSequenceState:
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = PartitionSequenceState()
        return state

    def has_in_flight(self) -> bool:
        """True while any sequenced batch is out."""
        return any(state.in_flight for state in self._partitions.values())

    def may_drain(self, batch: ProducerBatch) -> bool:
        """Whether the head batch of its partition may go out now without breaking order."""
        if self.needs_producer_id:
            return False
        state = self._partitions.get(batch.tp)
        if state is None:
            return True
        if batch.has_sequence:
            # A retry goes out only as the oldest unacknowledged batch of its partition.
            return bool(state.in_flight) and state.in_flight[0] is batch
        # New batches wait while an older one of the partition is being retried.
        return state.retrying == 0

    def prepare(self, batch: ProducerBatch) -> None:
        """Give a drained batch its producer id, epoch and sequence, and close it."""
        if batch.has_sequence:
            state = self._state(batch.tp)
            state.retrying = max(0, state.retrying - 1)
            if batch.producer_id != self.producer_id or batch.producer_epoch != self.producer_epoch:
                batch.producer_id = self.producer_id
                batch.producer_epoch = self.producer_epoch
                batch.builder.rewrite_producer_state(
                    self.producer_id,
                    self.producer_epoch,
                    batch.base_sequence,
                    self.transactional_id is not None,
                )
            return
        state = self._state(batch.tp)
        batch.base_sequence = state.next_sequence
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.producer_epoch
        batch.transactional = self.transactional_id is not None
        state.next_sequence = (state.next_sequence + batch.record_count) % _SEQUENCE_MODULO
        state.in_flight.append(batch)
        if batch.builder.closed:
            batch.builder.rewrite_producer_state(
                batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.transactional
            )
        else:
            batch.builder.close(
                batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.transactional
            )

    def mark_retrying(self, batch: ProducerBatch) -> None:
        """A sequenced batch goes back to the accumulator to be sent again."""
        if batch.has_sequence:
            self._state(batch.tp).retrying += 1

    def is_next_in_line(self, batch: ProducerBatch) -> bool:
        """True when every batch before this one of its partition was acknowledged."""
        state = self._partitions.get(batch.tp)
        if state is None:
            return True
        expected = (state.last_acked_sequence + 1) % _SEQUENCE_MODULO
        return batch.base_sequence == expected

    def on_success(self, batch: ProducerBatch) -> None:
        """The broker stored the batch."""
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        last = (batch.base_sequence + batch.record_count - 1) % _SEQUENCE_MODULO
        state.last_acked_sequence = last
        with contextlib.suppress(ValueError):
            state.in_flight.remove(batch)

    def on_final_failure(self, batch: ProducerBatch, reason: str) -> None:
        """A sequenced batch failed for good: its sequence numbers are a gap now."""
        state = self._partitions.get(batch.tp)
        if state is None or not batch.has_sequence:
            return
        try:
            state.in_flight.remove(batch)
        except ValueError:
            return
        self.request_reset(f"batch {batch.topic}-{batch.partition} failed: {reason}")

    def forget_split(self, batch: ProducerBatch) -> None:
        """A batch was split: its sequence range is abandoned, so the id must be reset."""
        state = self._partitions.get(batch.tp)
        if state is not None and batch in state.in_flight:
            state.in_flight.remove(batch)
            state.retrying = max(0, state.retrying - 1)
            self.request_reset(f"batch {batch.topic}-{batch.partition} was split")
