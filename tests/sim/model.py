"""A model of the Kafka cluster rules a producer meets: logs, producer state, a coordinator.

Everything here is plain synchronous state, changed only by the simulation at a virtual
time it passes in; nothing reads a clock or draws a random number except through the
``random.Random`` the simulation hands over, so a seed replays the same cluster.

What is modelled, and the Kafka class (apache/kafka trunk, ``storage`` and ``core``
modules, 4.x) each rule follows:

- :class:`PartitionModel`: one partition, its replicas, leader, leader epoch, one
  replicated log and its high watermark (``kafka.cluster.Partition``,
  ``ReplicaManager.appendRecords``). Replication is modelled as the high watermark
  catching up with the leader's log end some time after an append; an acks=all answer
  waits for it (``DelayedProduce``), and a leader change truncates what the new leader had
  not fetched (``Partition.makeLeader`` / ``UnifiedLog.truncateTo``).
- :class:`ProducerStateEntry` and :func:`check_append`: per producer id, the epoch and the
  metadata of its last five batches (``ProducerStateEntry``, ``NUM_BATCHES_TO_RETAIN = 5``);
  the duplicate check (``ProducerStateEntry.findDuplicateBatch``, done first by
  ``UnifiedLog.analyzeAndValidateProducerState``) and the epoch and sequence checks
  (``ProducerAppendInfo.checkProducerEpoch`` / ``checkSequence``).
- Producer state after a restart comes from a snapshot holding only the last batch of each
  producer (``ProducerStateManager.readSnapshot`` builds each entry with one
  ``BatchMetadata``); a follower that becomes leader has the state replication built
  (``ProducerStateManager`` updated by ``AppendOrigin.REPLICATION`` appends), which
  :meth:`PartitionModel.rebuild_state` recomputes from the log.
- :class:`Coordinator`: one transactional id's state in the transaction coordinator
  (``TransactionCoordinator``, ``TransactionMetadata``, ``TransactionStateManager``):
  InitProducerId, AddPartitionsToTxn (transactions v1), EndTxn with markers written to
  each partition some time later (``TransactionMarkerChannelManager``), the coordinator
  aborting transactions open past their timeout after bumping the epoch
  (``TransactionCoordinator.abortTimedOutTransactions``, ``prepareFenceProducerEpoch``).
- Transactions v2 (KIP-890 part 2, ``TransactionCoordinator.endTransaction`` with a client
  ``TransactionVersion`` that ``supportsEpochBump``): EndTxn bumps the epoch (a new producer
  id once it runs out) and the markers carry the bumped one; a retried EndTxn names the
  epoch before the bump (``endTxnEpochBumped``) and gets the current id and epoch; an abort
  the coordinator has nothing open for ends at once under a bumped epoch (an empty abort:
  the client cannot know whether a partition leader added a partition for it); a request at
  the current epoch while markers are being written waits (CONCURRENT_TRANSACTIONS,
  KAFKA-18464). Partition leaders add partitions for Produce v12+
  (``AddPartitionsToTxnManager`` with ``addPartition``), translating the coordinator's
  answers as ``ReplicaManager.appendRecords``' verification callback does.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from aioproducer.protocol.error_codes import ErrorCode

#: Kafka's ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``.
NUM_BATCHES_TO_RETAIN = 5
#: ``RecordBatch.NO_PRODUCER_EPOCH`` / ``NO_SEQUENCE``.
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SEQUENCE_MODULO = 2**31

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class LogBatch:
    """One batch in a partition's log: a data batch (record ids) or a control marker."""

    base_offset: int
    producer_id: int
    producer_epoch: int
    first_sequence: int
    last_sequence: int
    records: tuple[int, ...]
    transactional: bool
    # "COMMIT" or "ABORT" for a transaction marker (a control batch of one record).
    control: str | None = None

    @property
    def count(self) -> int:
        return 1 if self.control is not None else len(self.records)

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count


@dataclass(slots=True)
class ProducerStateEntry:
    """Kafka's ``ProducerStateEntry``: the epoch and the last batches of one producer id."""

    epoch: int = NO_PRODUCER_EPOCH
    # (first sequence, last sequence, first offset), oldest first.
    batches: deque[tuple[int, int, int]] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    # ``currentTxnFirstOffset``: set while the producer has a transaction open here.
    txn_first_offset: int | None = None

    def maybe_update_epoch(self, epoch: int) -> None:
        # ProducerStateEntry.maybeUpdateProducerEpoch: a new epoch forgets the batches.
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def add_batch(self, epoch: int, first: int, last: int, offset: int) -> None:
        # ProducerStateEntry.addBatch: keeps NUM_BATCHES_TO_RETAIN (the deque's maxlen).
        self.maybe_update_epoch(epoch)
        self.batches.append((first, last, offset))

    def find_duplicate(self, epoch: int, first: int, last: int) -> int | None:
        """``findDuplicateBatch``: the first offset of the batch with this exact range."""
        if epoch != self.epoch:
            return None
        for seen_first, seen_last, offset in self.batches:
            if (seen_first, seen_last) == (first, last):
                return offset
        return None

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else NO_SEQUENCE


def check_append(entry: ProducerStateEntry | None, epoch: int, first: int) -> int:
    """The error code for a client's data batch (after the duplicate check), or 0.

    ``ProducerAppendInfo.checkProducerEpoch`` then ``checkSequence`` (trunk, as of Kafka
    4.x; the broker stopped answering UNKNOWN_PRODUCER_ID in 2.5 with KIP-360, and a
    producer it holds no state for may start at any sequence).
    """
    current_epoch = entry.epoch if entry is not None else NO_PRODUCER_EPOCH
    if epoch < current_epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if epoch != current_epoch:
        # A new epoch must start at sequence 0, unless the broker knows no epoch at all.
        if first != 0 and current_epoch != NO_PRODUCER_EPOCH:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        return 0
    assert entry is not None
    last = entry.last_sequence
    in_sequence = first == last + 1 or (first == 0 and last == SEQUENCE_MODULO - 1)
    if not in_sequence:
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    return 0


def replay(batches: list[LogBatch], states: dict[int, ProducerStateEntry]) -> None:
    """Apply log batches to producer state as replication does (no validation)."""
    for batch in batches:
        if batch.producer_id < 0:
            continue
        entry = states.get(batch.producer_id)
        if entry is None:
            entry = states[batch.producer_id] = ProducerStateEntry()
        if batch.control is not None:
            # ProducerAppendInfo.appendEndTxnMarker: the marker's epoch, no transaction open.
            entry.maybe_update_epoch(batch.producer_epoch)
            entry.txn_first_offset = None
            continue
        entry.add_batch(
            batch.producer_epoch, batch.first_sequence, batch.last_sequence, batch.base_offset
        )
        if batch.transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = batch.base_offset


class PartitionModel:
    """One partition: replicas, leader, the replicated log and the leader's producer state.

    The log is shared by the replicas: ``hw`` batches are on every in-sync replica; the ones
    after it only on the leader until replication catches up (:meth:`replicate`). A new
    leader keeps what it had fetched, a prefix of the unreplicated tail (:meth:`elect`).
    """

    def __init__(self, topic: str, index: int, replicas: list[int]) -> None:
        self.tp: TopicPartition = (topic, index)
        self.replicas = replicas
        self.leader = replicas[0]
        self.leader_epoch = 0
        self.log: list[LogBatch] = []
        self.hw = 0  # batches replicated to every in-sync replica
        self.states: dict[int, ProducerStateEntry] = {}
        # Broker -> number of log batches it held when it last restarted: its producer
        # state for those comes from a snapshot (the last batch per producer only).
        self.snapshot_at: dict[int, int] = {}
        # Bumped at every leader change or truncation: pending replication events of an
        # older generation do nothing.
        self.generation = 0

    @property
    def end_offset(self) -> int:
        return self.log[-1].next_offset if self.log else 0

    def append(self, batch: LogBatch) -> None:
        self.log.append(batch)
        replay([batch], self.states)

    def replicate(self, upto: int, generation: int) -> bool:
        """Replication reached log batch ``upto``; True when the high watermark moved."""
        if generation != self.generation or self.leader < 0:
            return False
        upto = min(upto, len(self.log))
        if upto <= self.hw:
            return False
        self.hw = upto
        return True

    def rebuild_state(self, broker: int) -> dict[int, ProducerStateEntry]:
        """The producer state ``broker`` has as leader: from its snapshot (last batch per
        producer) for what it held when it restarted, then from replication."""
        states: dict[int, ProducerStateEntry] = {}
        cut = min(self.snapshot_at.get(broker, 0), len(self.log))
        if cut:
            replay(self.log[:cut], states)
            for entry in states.values():
                # ProducerStateManager.readSnapshot: one BatchMetadata per producer.
                while len(entry.batches) > 1:
                    entry.batches.popleft()
        replay(self.log[cut:], states)
        return states

    def elect(self, leader: int, keep_unreplicated: int) -> list[LogBatch]:
        """``leader`` takes over, having fetched ``keep_unreplicated`` batches past the high
        watermark; the rest of the tail is truncated and returned."""
        keep = min(len(self.log), self.hw + keep_unreplicated)
        truncated = self.log[keep:]
        del self.log[keep:]
        self.leader = leader
        self.leader_epoch += 1
        self.generation += 1
        if leader >= 0:
            # The new leader's followers catch up with it (Partition.makeLeader).
            self.hw = len(self.log)
            self.states = self.rebuild_state(leader)
        return truncated


class TxnState(enum.Enum):
    """``TransactionState`` of the coordinator (the ones this model needs)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


@dataclass
class CoordinatorTxn:
    """``TransactionMetadata`` of one transactional id."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    started_at: float = 0.0
    # The epoch the markers of the transaction being completed carry.
    marker_epoch: int = -1
    # ``clientTransactionVersion`` of the last EndTxn: 2 when each EndTxn bumps the epoch.
    version: int = 1


class Coordinator:
    """The transaction coordinator's answers for transactional ids (transactions v1 and v2).

    Markers are written by the simulation (it owns the partitions) when
    :meth:`end_txn` or :meth:`abort_timed_out` ask for them, and reported done through
    :meth:`markers_written`.
    """

    def __init__(self, server_version: int = 1) -> None:
        self.txns: dict[str, CoordinatorTxn] = {}
        self.next_producer_id = 1000
        # The cluster's finalized transaction.version: what the coordinator's own aborts
        # (a timeout, a fence by InitProducerId) record as the transaction's version.
        self.server_version = server_version

    def new_producer_id(self) -> int:
        self.next_producer_id += 1
        return self.next_producer_id

    def init_producer_id(
        self, tid: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[int, int, int, bool]:
        """(error, producer id, epoch, markers to write). TransactionCoordinator.
        handleInitProducerId: an open transaction is aborted first (the client retries on
        CONCURRENT_TRANSACTIONS); KIP-360: a request naming an id and epoch must name the
        current ones (or the previous epoch, a retry of this bump)."""
        txn = self.txns.get(tid)
        if txn is None:
            txn = self.txns[tid] = CoordinatorTxn(self.new_producer_id(), -1, timeout_ms)
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1, False
        if producer_id >= 0 and (
            producer_id != txn.producer_id or producer_epoch != txn.producer_epoch
        ):
            return ErrorCode.PRODUCER_FENCED, -1, -1, False
        if txn.state is TxnState.ONGOING:
            # Fence the old epoch and abort (prepareAbortOrCommit after an epoch bump; with
            # transactions v2 the abort does not bump again, KAFKA-19367).
            txn.producer_epoch += 1
            txn.marker_epoch = txn.producer_epoch
            txn.state = TxnState.PREPARE_ABORT
            txn.version = self.server_version
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1, True
        txn.producer_epoch += 1
        if txn.producer_epoch >= 32767:
            txn.producer_id = self.new_producer_id()
            txn.producer_epoch = 0
        txn.timeout_ms = timeout_ms
        txn.state = TxnState.EMPTY
        txn.partitions = set()
        return 0, txn.producer_id, txn.producer_epoch, False

    def _check(self, tid: str, producer_id: int, epoch: int) -> tuple[int, CoordinatorTxn | None]:
        txn = self.txns.get(tid)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if epoch != txn.producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        return 0, txn

    def add_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: list[TopicPartition], now: float
    ) -> int:
        """TransactionCoordinator.handleAddPartitionsToTransaction."""
        code, txn = self._check(tid, producer_id, epoch)
        if txn is None:
            return code
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if txn.state is not TxnState.ONGOING:
            txn.state = TxnState.ONGOING
            txn.started_at = now
            txn.partitions = set()
        txn.partitions.update(partitions)
        return 0

    def end_txn(
        self, tid: str, producer_id: int, epoch: int, committed: bool, version: int = 1
    ) -> tuple[int, bool, int, int]:
        """(error, markers to write, producer id, epoch); the id and epoch are what an EndTxn
        v5 answer carries (-1 when it failed). TransactionCoordinator.endTransaction."""
        if version >= 2:
            return self._end_txn_v2(tid, producer_id, epoch, committed)
        code, txn = self._check(tid, producer_id, epoch)
        if txn is None:
            return code, False, -1, -1
        state = txn.state
        if state is TxnState.ONGOING:
            txn.state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
            txn.marker_epoch = txn.producer_epoch
            txn.version = 1
            return 0, True, -1, -1
        return self._end_txn_again(txn, committed), False, -1, -1

    @staticmethod
    def _end_txn_again(txn: CoordinatorTxn, committed: bool) -> int:
        """The answer to an EndTxn for a transaction that is being or was completed."""
        state = txn.state
        if state is TxnState.COMPLETE_COMMIT:
            return 0 if committed else ErrorCode.INVALID_TXN_STATE
        if state is TxnState.COMPLETE_ABORT:
            return 0 if not committed else ErrorCode.INVALID_TXN_STATE
        if state is TxnState.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if committed else ErrorCode.INVALID_TXN_STATE
        if state is TxnState.PREPARE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if committed else ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    def _bump(self, txn: CoordinatorTxn) -> None:
        # TransactionMetadata.prepareAbortOrCommit with an epoch bump; a new producer id
        # once the epoch is exhausted (isProducerEpochExhausted).
        if txn.producer_epoch >= 32766:
            txn.producer_id = self.new_producer_id()
            txn.producer_epoch = 0
        else:
            txn.producer_epoch += 1

    def _end_txn_v2(
        self, tid: str, producer_id: int, epoch: int, committed: bool
    ) -> tuple[int, bool, int, int]:
        txn = self.txns.get(tid)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, False, -1, -1
        state = txn.state
        # endTxnEpochBumped: a retry of an EndTxn that bumped the epoch.
        retry = txn.version >= 2 and txn.producer_epoch == epoch + 1
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            if epoch == txn.producer_epoch:
                # KAFKA-18464: the next EndTxn waits until the markers are written.
                return ErrorCode.CONCURRENT_TRANSACTIONS, False, -1, -1
            if not retry:
                return ErrorCode.PRODUCER_FENCED, False, -1, -1
            return self._end_txn_again(txn, committed), False, -1, -1
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and retry:
            code = self._end_txn_again(txn, committed)
            if code:
                return code, False, -1, -1
            return 0, False, txn.producer_id, txn.producer_epoch
        if epoch != txn.producer_epoch:
            return ErrorCode.PRODUCER_FENCED, False, -1, -1
        txn.version = 2
        if state is TxnState.ONGOING:
            self._bump(txn)
            txn.state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
            txn.marker_epoch = txn.producer_epoch
            return 0, True, txn.producer_id, txn.producer_epoch
        if committed:
            return ErrorCode.INVALID_TXN_STATE, False, -1, -1
        # An empty abort: nothing open, no markers; the epoch is bumped all the same.
        self._bump(txn)
        txn.state = TxnState.COMPLETE_ABORT
        txn.partitions = set()
        return 0, False, txn.producer_id, txn.producer_epoch

    def verify(self, tid: str, producer_id: int, epoch: int, tp: TopicPartition) -> int:
        """KIP-890 part 1 (``transaction.partition.verification.enable``, on by default
        since 3.6): the leader asks the coordinator whether the partition is in the
        producer's open transaction before the first transactional append."""
        code, txn = self._check(tid, producer_id, epoch)
        if txn is None:
            return ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED else code
        if txn.state is not TxnState.ONGOING or tp not in txn.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return 0

    def abort_timed_out(self, now: float) -> list[str]:
        """The transactional ids whose open transaction outlived its timeout: their epoch is
        bumped (fencing the producer) and the abort markers carry it."""
        aborted = []
        for tid, txn in self.txns.items():
            if txn.state is TxnState.ONGOING and now - txn.started_at > txn.timeout_ms / 1000.0:
                txn.producer_epoch += 1
                txn.marker_epoch = txn.producer_epoch
                txn.state = TxnState.PREPARE_ABORT
                txn.version = self.server_version
                aborted.append(tid)
        return aborted

    def markers_written(self, tid: str) -> None:
        txn = self.txns[tid]
        if txn.state is TxnState.PREPARE_COMMIT:
            txn.state = TxnState.COMPLETE_COMMIT
        elif txn.state is TxnState.PREPARE_ABORT:
            txn.state = TxnState.COMPLETE_ABORT
        txn.partitions = set()
