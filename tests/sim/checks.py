"""The invariants checked after every simulated run (Jepsen-style: on the history and the log).

For every record the workload sent, what the producer told the application (its future)
is compared with the cluster's log, and a transaction's outcome with what a
``read_committed`` consumer would see:

- an acknowledged record is in the log exactly once under idempotence (at least once
  without), at the offset its metadata names (acks=all; acks=1 may lose it);
- under idempotence, each partition's acknowledged records are in the log in the order
  they were sent;
- a record failed with a *definite* error (``maybe_written`` False) is not in the log (not
  visible, for a transaction's records); an *ambiguous* failure (``maybe_written`` True)
  may have been written, but at most once under idempotence, and only if it was sent;
- a committed transaction holds all its records, each visible once, and a commit that
  succeeded while one of its records failed is a violation; an aborted one shows none;
  no transaction is partly visible;
- every record future completes within ``delivery_timeout_ms`` (plus a bounded slack) of
  its send; commits and aborts complete within a bound; nothing hangs once faults heal;
- the producer sends no request over ``max_in_flight_requests_per_connection`` and none to a
  broker that asked it to wait (KIP-219 throttling);
- an idempotent producer never bumps its epoch to restart a partition whose unresolved
  sequence (batches that expired in flight) a success it had received already covers;
- the producer never logs an internal error (a traceback at its fault boundary).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from aioproducer.errors import KafkaError
from tests.sim.simulation import T0, RecordInfo, Simulation

#: Virtual seconds a future may complete after its delivery deadline (the sender looks
#: at in-flight deadlines at each step it asks for).
COMPLETION_SLACK = 0.5


def is_ambiguous(error: BaseException) -> bool:
    """Whether a record failed with ``error`` may still have been written, as the error
    tells the application (``KafkaError.maybe_written``)."""
    return not isinstance(error, KafkaError) or error.maybe_written


@dataclass
class LogView:
    """What the log holds of each record: where (every copy), and which are visible to a
    ``read_committed`` reader (non-transactional, or in a transaction with a COMMIT marker)."""

    copies: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    visible: dict[int, int] = field(default_factory=dict)


def read_log(simulation: Simulation) -> LogView:
    view = LogView()
    for partition in simulation.partitions:
        index = partition.tp[1]
        open_txns: dict[int, list[int]] = {}
        for batch in partition.log:
            if batch.control is not None:
                rids = open_txns.pop(batch.producer_id, [])
                if batch.control == "COMMIT":
                    for rid in rids:
                        view.visible[rid] = view.visible.get(rid, 0) + 1
                continue
            for position, rid in enumerate(batch.records):
                view.copies.setdefault(rid, []).append((index, batch.base_offset + position))
            if batch.transactional:
                open_txns.setdefault(batch.producer_id, []).extend(batch.records)
            else:
                for rid in batch.records:
                    view.visible[rid] = view.visible.get(rid, 0) + 1
    return view


def _error(record: RecordInfo) -> BaseException | None:
    return record.future.exception() if record.future.done() else None


def check(simulation: Simulation) -> list[str]:
    """Every invariant violated by the run, one line each (empty when all hold)."""
    violations: list[str] = []
    config = simulation.producer_config
    idempotent = simulation.idempotence is not None
    acks_all = config.acks == -1
    view = read_log(simulation)
    delivery_timeout = config.delivery_timeout_ms / 1000.0
    for record in simulation.records:
        rid = record.rid
        copies = view.copies.get(rid, [])
        if idempotent and len(copies) > 1:
            violations.append(f"r{rid} is in the log {len(copies)} times: {copies}")
        if not record.future.done():
            continue
        assert record.done_at is not None
        late = record.done_at - record.sent_at - delivery_timeout
        if late > COMPLETION_SLACK:
            violations.append(
                f"r{rid} completed {late:.3f}s after its delivery_timeout_ms "
                f"(sent at {record.sent_at - T0:.3f}, done at {record.done_at - T0:.3f})"
            )
        error = _error(record)
        if error is None:
            offset = record.future.result().offset
            if acks_all and not copies:
                violations.append(
                    f"r{rid} was acknowledged (offset {offset}) but is not in the log"
                )
            elif acks_all and (record.partition, offset) not in copies:
                violations.append(
                    f"r{rid} was acknowledged at p{record.partition}@{offset} but the log has it "
                    f"at {copies}"
                )
            continue
        if is_ambiguous(error):
            if rid not in simulation.sent_rids:
                violations.append(
                    f"r{rid} was never sent, yet its error says it may have been written "
                    f"({type(error).__name__}: {error})"
                )
            continue
        # A transaction's record counts as written when a read_committed reader sees it.
        present = view.visible.get(rid, 0) > 0 if record.txn >= 0 else bool(copies)
        if present:
            violations.append(
                f"r{rid} failed with a definite error ({type(error).__name__}: {error}) but is "
                f"in the log at {copies}"
            )
    if idempotent and acks_all:
        violations.extend(_check_order(simulation, view))
    violations.extend(_check_transactions(simulation, view))
    violations.extend(f"needless epoch bump: {text}" for text in simulation.needless_bumps)
    violations.extend(f"protocol: {text}" for text in simulation.protocol_violations)
    violations.extend(f"hang: {text}" for text in simulation.hung)
    violations.extend(f"internal error logged: {text}" for text in simulation.internal_errors)
    return violations


def _check_order(simulation: Simulation, view: LogView) -> list[str]:
    violations = []
    for partition in range(len(simulation.partitions)):
        acknowledged = [
            record
            for record in simulation.records
            if record.partition == partition
            and record.future.done()
            and record.future.exception() is None
            and view.copies.get(record.rid)
        ]
        acknowledged.sort(key=lambda record: min(view.copies[record.rid])[1])
        for before, after in itertools.pairwise(acknowledged):
            if before.order > after.order:
                violations.append(
                    f"p{partition}: acknowledged r{after.rid} was sent before r{before.rid} but "
                    f"is after it in the log"
                )
                break
    return violations


def _check_transactions(simulation: Simulation, view: LogView) -> list[str]:
    violations = []
    for txn in simulation.txns:
        rids = [record.rid for record in txn.records]
        visible = [rid for rid in rids if view.visible.get(rid, 0)]
        if txn.outcome == "committed":
            for record in txn.records:
                error = _error(record)
                if error is not None or not record.future.done():
                    violations.append(
                        f"transaction {txn.number} committed though r{record.rid} "
                        + (
                            f"failed ({type(error).__name__}: {error})"
                            if error
                            else "never completed"
                        )
                    )
                count = view.visible.get(record.rid, 0)
                if count != 1:
                    violations.append(
                        f"transaction {txn.number} committed but r{record.rid} is visible "
                        f"{count} times"
                    )
        elif txn.outcome == "aborted" and visible:
            violations.append(
                f"transaction {txn.number} was aborted but {[f'r{r}' for r in visible]} are visible"
            )
        if visible and len(visible) != len(rids):
            missing = sorted(set(rids) - set(visible))
            violations.append(
                f"transaction {txn.number} ({txn.outcome or 'no outcome'}) is partly visible: "
                f"{[f'r{r}' for r in missing]} missing"
            )
        if txn.end_done_at is not None:
            bound = (
                max(txn.end_started_at, T0 + simulation.config.heal_at)
                + simulation.producer_config.delivery_timeout_ms / 1000.0
                + 5 * simulation.producer_config.request_timeout_ms / 1000.0
                + 5.0
            )
            if txn.end_done_at > bound:
                violations.append(
                    f"the {txn.ending} of transaction {txn.number} took until "
                    f"{txn.end_done_at - T0:.3f} (bound {bound - T0:.3f})"
                )
    return violations


def notes(simulation: Simulation) -> list[str]:
    """Findings that are not violations: a sender that asked to run again at once, sending
    nothing, for a noticeable span of virtual time."""
    found = []
    if simulation.spinning >= 0.05:
        found.append(
            f"the sender asked to run again at once, sending nothing, for "
            f"{simulation.spinning:.3f}s of virtual time (a busy loop)"
        )
    return found
