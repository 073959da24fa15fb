"""Keyed rows sent from Arrow buffers: ``aioproducer._native.arrowcols.BinaryPairs`` (the
columns read without a Python object per row) and ``RecordAppender.append_rows``, which
takes it as ``append_pairs`` takes ``(key, value)`` tuples. The records stored must be the
same, byte for byte, in the same partitions and order, with the same metadata.

The C helper is built with the compiled hot path only; without it the Spark data source
hands ``send_many`` lists, so these tests are skipped in the pure-Python install.
"""

from __future__ import annotations

import gc
import os
import random
import struct
from typing import Any

import pytest

from aioproducer._core.futures import BatchResults
from aioproducer._core.partitioner import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    murmur2,
    to_positive,
)
from aioproducer.protocol.record_batch import RecordBatchBuilder
from tests.unit.test_appender import BATCH_SIZE, TOPIC, Harness, _send_many, _stored

arrowcols = pytest.importorskip(
    "aioproducer._native.arrowcols", reason="the C helper is built with the compiled hot path"
)
pa = pytest.importorskip("pyarrow")

Pair = tuple[bytes | None, bytes | None]


def _spec(array: Any) -> tuple[Any, Any, Any, int, bool]:
    validity, offsets, data = array.buffers()
    return (validity, offsets, data, array.offset, str(array.type).startswith("large_"))


def _rows(pairs: list[Pair], kind: Any = None, offset: int = 0, keyless: bool = False) -> Any:
    """A BinaryPairs of ``pairs``, whose Arrow arrays start ``offset`` rows into their
    buffers (a slice, as Spark's batches may be); without a key column if ``keyless``."""
    kind = kind or pa.binary()
    padding: list[Pair] = [(b"pad", b"pad")] * offset
    everything = padding + pairs
    keys = pa.array([k for k, _ in everything], kind).slice(offset)
    values = pa.array([v for _, v in everything], kind).slice(offset)
    return arrowcols.BinaryPairs(len(pairs), None if keyless else _spec(keys), _spec(values))


def _random_pairs(count: int, seed: int, null_keys: float = 0.0) -> list[Pair]:
    rng = random.Random(seed)
    return [
        (
            None if rng.random() < null_keys else rng.randbytes(rng.randint(0, 24)),
            None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 300)),
        )
        for _ in range(count)
    ]


# ---- BinaryPairs itself ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["binary", "large_binary"])
@pytest.mark.parametrize("offset", [0, 13])
def test_the_rows_read_as_the_pairs_they_were_made_of(kind: str, offset: int) -> None:
    pairs = _random_pairs(700, seed=1, null_keys=0.2)
    rows = _rows(pairs, getattr(pa, kind)(), offset)
    assert len(rows) == len(pairs)
    assert list(rows) == pairs
    assert rows[699] == pairs[699]
    with pytest.raises(IndexError):
        rows[700]
    # Tuples of bytes and None can be in no cycle: they start untracked.
    assert not gc.is_tracked(rows[0])


def test_string_columns_are_their_utf8_bytes() -> None:
    keys = pa.array(["ключ", None, ""], pa.string())
    values = pa.array(["värde", "v", None], pa.large_string())
    rows = arrowcols.BinaryPairs(3, _spec(keys), _spec(values))
    assert list(rows) == [("ключ".encode(), "värde".encode()), (None, b"v"), (b"", None)]


def test_the_hash_of_each_key_is_the_java_clients_murmur2() -> None:
    pairs = _random_pairs(2000, seed=2, null_keys=0.05)
    rows = _rows(pairs)
    for row, (key, _) in enumerate(pairs):
        assert rows.murmur2(row) == (None if key is None else murmur2(key))


def test_rows_group_by_the_partition_of_their_key_up_to_the_first_without_one() -> None:
    pairs = _random_pairs(300, seed=3)
    pairs[200] = (None, b"no key")
    rows = _rows(pairs)
    groups, largest, taken = rows.group(10, 256, 7, -1)
    assert taken == 190, "grouping goes on past a row without a key"
    expected: dict[int, list[int]] = {}
    for place in range(taken):
        key, _ = pairs[10 + place]
        assert key is not None
        expected.setdefault(to_positive(murmur2(key)) % 7, []).append(place)
    assert groups == expected
    assert list(groups) == list(expected), "partitions in the order of their first row"
    assert largest == max(len(k or b"") + len(v or b"") for k, v in pairs[10:200])
    # A partition given: every row goes to it, with or without a key.
    groups, _, taken = rows.group(190, 20, 7, 4)
    assert (groups, taken) == ({4: list(range(20))}, 20)


@pytest.mark.parametrize("first_offset", [0, 3, 70_000])
def test_encoded_rows_are_the_records_the_builder_writes_for_the_same_pairs(
    first_offset: int,
) -> None:
    pairs = _random_pairs(400, seed=4, null_keys=0.1)
    rows = _rows(pairs)
    places = list(range(0, 400, 3))  # every third row, as a partition's share of a chunk
    timestamp = 1_700_000_000_000
    by_builder = RecordBatchBuilder(bytearray(4 << 20))
    by_rows = RecordBatchBuilder(bytearray(4 << 20))
    for builder in (by_builder, by_rows):
        if first_offset:
            builder.append_values(timestamp, [b"x"] * first_offset, 0, first_offset)
    for place in places:
        by_builder.try_append(timestamp + 7, pairs[place][0], pairs[place][1], None)
    assert by_rows.append_rows(timestamp + 7, rows, 0, places, 0, len(places)) == len(places)
    assert by_rows.record_count == by_builder.record_count
    assert by_rows.size_in_bytes == by_builder.size_in_bytes
    assert by_rows.max_timestamp == by_builder.max_timestamp
    assert bytes(by_rows.close(1, 2, 3)) == bytes(by_builder.close(1, 2, 3))


def test_encoding_stops_at_the_first_row_that_does_not_fit() -> None:
    pairs = [(b"k%d" % i, b"v" * 100) for i in range(50)]
    rows = _rows(pairs)
    builder = RecordBatchBuilder(bytearray(1024))
    places = list(range(50))
    fits = builder.append_rows(5, rows, 0, places, 0, 50, write=False)
    assert builder.record_count == 0, "counting wrote records"
    stopped = builder.append_rows(5, rows, 0, places, 0, 50)
    assert stopped == fits and 0 < stopped < 50
    assert builder.record_count == stopped and builder.remaining < 120
    with pytest.raises(ValueError, match="cannot hold the first record"):
        RecordBatchBuilder(bytearray(100)).append_rows(5, rows, 0, places, 0, 1)


def test_encoding_packs_the_sizes_of_the_records_it_writes() -> None:
    # The key and value sizes of each record written (-1 for a null), appended to a
    # bytearray as two native int32: what a call's results keep of the records.
    pairs = [
        (None if i % 7 == 3 else b"k%d" % i, None if i % 5 == 1 else b"v" * i) for i in range(50)
    ]
    rows = _rows(pairs)
    builder = RecordBatchBuilder(bytearray(600))
    places = list(range(0, 50, 2))
    sizes = bytearray(b"kept")
    stopped = builder.append_rows(5, rows, 0, places, 0, len(places), True, sizes)
    assert 0 < stopped < len(places), "the test wants the batch to fill up"
    written = [pairs[place] for place in places[:stopped]]
    expected = [-1 if part is None else len(part) for pair in written for part in pair]
    assert sizes == b"kept" + struct.pack(f"={len(expected)}i", *expected)
    # Counting alone adds none.
    builder.append_rows(5, rows, 0, places, stopped, len(places), False, sizes)
    assert len(sizes) == 4 + 8 * stopped


def test_packed_sizes_are_each_rows_key_and_value_length_or_minus_one() -> None:
    pairs = _random_pairs(100, seed=5, null_keys=0.3)
    rows = _rows(pairs)
    sizes = bytearray()
    builder = RecordBatchBuilder(bytearray(1 << 16))
    assert builder.append_rows(5, rows, 20, [0, 5, 79], 0, 3, True, sizes) == 3
    picked = [pairs[20], pairs[25], pairs[99]]
    expected = [-1 if part is None else len(part) for pair in picked for part in pair]
    assert sizes == struct.pack("=6i", *expected)


def test_rows_without_a_key_column_are_key_less_values_in_order() -> None:
    pairs = [(None, v) for _, v in _random_pairs(300, seed=9)]
    rows = _rows(pairs, keyless=True)
    assert rows.keyless() and not _rows(pairs).keyless()
    assert list(rows) == pairs
    assert rows.group(0, 10, 3, -1)[2] == 0, "no key to hash"
    assert rows.value_bytes(5, 250) == sum(len(v or b"") for _, v in pairs[5:250])
    sizes = bytearray()
    packing = RecordBatchBuilder(bytearray(1 << 20))
    assert packing.append_rows(9, rows, 0, None, 10, 20, True, sizes) == 20
    expected = [size for _, v in pairs[10:20] for size in (-1, -1 if v is None else len(v))]
    assert sizes == struct.pack("=20i", *expected)
    by_values = RecordBatchBuilder(bytearray(1 << 20))
    by_rows = RecordBatchBuilder(bytearray(1 << 20))
    for _, value in pairs[:100]:
        by_values.try_append(9, None, value, None)
    assert by_rows.append_rows(9, rows, 0, None, 0, 100) == 100
    assert bytes(by_rows.close()) == bytes(by_values.close())
    with pytest.raises(TypeError):
        arrowcols.BinaryPairs(1, _spec(pa.array([b"k"])), None)  # values are never absent


def test_malformed_columns_and_places_outside_the_rows_are_refused() -> None:
    good = pa.array([b"a", b"bc"])
    # Offsets past the data: refused when the object is made, never read.
    offsets = (0).to_bytes(4, "little") + (50).to_bytes(4, "little")
    with pytest.raises(ValueError, match="outside its data"):
        arrowcols.BinaryPairs(1, (None, offsets, b"abc", 0, False), _spec(good))
    with pytest.raises(ValueError, match="offsets buffer is too short"):
        arrowcols.BinaryPairs(3, _spec(good), _spec(good))
    with pytest.raises(TypeError):
        arrowcols.BinaryPairs(2, (None, None), _spec(good))
    rows = arrowcols.BinaryPairs(2, _spec(good), _spec(good))
    with pytest.raises(IndexError):
        rows.encode(b"\x00\x00", 0, 0, [2], 0, 1, 1000, True)
    with pytest.raises(IndexError):
        rows.encode(b"\x00\x00", 0, 1, [0, 1], 0, 2, 1000, True)
    with pytest.raises(IndexError):
        rows.group(1, 2, 3, -1)
    with pytest.raises(ValueError):
        rows.group(0, 2, 0, -1)
    with pytest.raises(TypeError):
        rows.encode(b"\x00\x00", 0, 0, [0], 0, 1, 1000, True, [])  # sizes: a bytearray


def test_a_buffer_changed_after_the_rows_were_made_is_never_read_out_of_bounds() -> None:
    # A writable buffer (an array made with pa.array, say) may change while the rows hold
    # it: each row is checked again as it is read, and what no longer fits is refused.
    offsets = bytearray((0).to_bytes(4, "little") + (3).to_bytes(4, "little"))
    rows = arrowcols.BinaryPairs(1, (None, offsets, b"abc", 0, False), _spec(pa.array([b"v"])))
    assert rows[0] == (b"abc", b"v")
    offsets[4:8] = (200).to_bytes(4, "little")
    for read in (
        lambda: rows[0],
        lambda: rows.murmur2(0),
        lambda: rows.group(0, 1, 3, -1),
        lambda: rows.encode(b"\x00\x00", 0, 0, [0], 0, 1, 10_000, True),
        lambda: rows.encode(b"\x00\x00", 0, 0, [0], 0, 1, 10_000, True, bytearray()),
    ):
        with pytest.raises(ValueError, match="outside its data"):
            read()


# ---- RecordAppender.append_rows ----------------------------------------------------------------


def _send_rows(h: Harness, rows: Any, partition: int | None = None) -> BatchResults:
    """Producer._send_many's loop over a BinaryPairs, with memory enough for every batch:
    append_rows as far as it goes, the row there the general way, and on."""
    results = BatchResults()
    index = 0
    while index < len(rows):
        index = h.appender.append_rows(TOPIC, partition, 5, rows, index, results)
        if index < len(rows):
            pending = h.appender.prepare_item(TOPIC, partition, rows[index], 5, results)
            assert pending is None, "no record should wait here"
            index += 1
    return results


async def _acknowledge_and_read(h: Harness, results: BatchResults, partitions: int) -> list[Any]:
    for partition in range(partitions):
        base = 0
        for batch in h.accumulator.deque_for((TOPIC, partition)):
            batch.complete(base, -1)
            base += batch.record_count
    return list(await results)


async def test_rows_are_stored_and_reported_as_the_same_pairs_sent_as_tuples() -> None:
    pairs = _random_pairs(1500, seed=6, null_keys=0.01)
    # The same random source for both: rows without a key go to the sticky partition.
    by_rows = Harness(
        partitioner=DefaultPartitioner(BATCH_SIZE, rng=random.Random(8)), value_serializer=None
    )
    by_tuples = Harness(
        partitioner=DefaultPartitioner(BATCH_SIZE, rng=random.Random(8)), value_serializer=None
    )
    for h in (by_rows, by_tuples):
        h.know_topic(partitions=3)
        assert h.appender.takes_rows(None, keyless=False)
    rows_results = _send_rows(by_rows, _rows(pairs))
    tuple_results = _send_many(by_tuples, list(pairs))
    assert len(rows_results) == len(pairs)
    assert _stored(by_rows) == _stored(by_tuples)
    for partition, records in _stored(by_rows).items():
        keyed = [
            pair for pair in pairs
            if pair[0] is not None and to_positive(murmur2(pair[0])) % 3 == partition
        ]
        assert [record for record in records if record[0] is not None] == keyed
    rows_metadata = await _acknowledge_and_read(by_rows, rows_results, 3)
    tuple_metadata = await _acknowledge_and_read(by_tuples, tuple_results, 3)
    assert rows_metadata == tuple_metadata
    for (key, value), meta in zip(pairs, rows_metadata, strict=True):
        assert meta.serialized_key_size == (-1 if key is None else len(key))
        assert meta.serialized_value_size == (-1 if value is None else len(value))
    assert [f.result() for f in rows_results.futures] == rows_metadata


async def test_rows_to_a_partition_given_take_keyless_rows_too() -> None:
    pairs = _random_pairs(600, seed=7, null_keys=0.5)
    h = Harness(partitioner=DefaultPartitioner(BATCH_SIZE), value_serializer=None)
    h.know_topic(partitions=3)
    results = BatchResults()
    rows = _rows(pairs)
    assert h.appender.append_rows(TOPIC, 2, 5, rows, 0, results) == len(pairs)
    assert _stored(h) == {2: pairs}
    metadata = await _acknowledge_and_read(h, results, 3)
    assert [meta.offset for meta in metadata] == list(range(600))
    # A partition the topic does not have: left to the general path, which refuses it.
    assert h.appender.append_rows(TOPIC, 3, 5, rows, 0, BatchResults()) == 0


async def test_rows_stop_at_the_first_that_must_wait_for_memory() -> None:
    h = Harness(
        buffer_memory=2 * BATCH_SIZE,
        partitioner=DefaultPartitioner(BATCH_SIZE),
        value_serializer=None,
    )
    h.know_topic(partitions=2)
    keys: dict[int, bytes] = {}
    number = 0
    while len(keys) < 2:
        key = str(number).encode()
        keys.setdefault(to_positive(murmur2(key)) % 2, key)
        number += 1
    pairs: list[Pair] = []
    for _ in range(12):
        pairs.append((keys[0], b"a" * 100))
        pairs.append((keys[1], b"b" * 10))
    results = BatchResults()
    index = h.appender.append_rows(TOPIC, None, 5, _rows(pairs), 0, results)
    # Partition 0's batch fills, and the pool has no memory for another: the row that
    # needs one stops the call, and nothing after it is taken, not even partition 1's.
    assert 0 < index < len(pairs) and pairs[index][0] == keys[0]
    assert len(results) == index
    stored = _stored(h)
    assert stored[0] == [pair for pair in pairs[:index] if pair[0] == keys[0]]
    assert stored[1] == [pair for pair in pairs[:index] if pair[0] == keys[1]]
    pending = h.appender.prepare_item(TOPIC, None, _rows(pairs)[index], 5, results)
    assert pending is not None and pending.needs_memory and pending.target == 0


async def test_key_less_rows_are_stored_and_reported_as_the_same_plain_values() -> None:
    # Rows without a key column go as send_many's plain values do: a run per batch to the
    # partition the sticky partitioner picks (told of each run's bytes), a new batch started
    # by the general path. The same random source for both: the same partitions.
    rng = random.Random(10)
    values = [rng.randbytes(rng.randint(0, 300)) for _ in range(1500)]
    by_rows = Harness(
        partitioner=DefaultPartitioner(BATCH_SIZE, rng=random.Random(3)), value_serializer=None
    )
    by_values = Harness(
        partitioner=DefaultPartitioner(BATCH_SIZE, rng=random.Random(3)), value_serializer=None
    )
    for h in (by_rows, by_values):
        h.know_topic(partitions=3)
    rows_results = _send_rows(by_rows, _rows([(None, v) for v in values], keyless=True))
    value_results = _send_many(by_values, list(values))
    stored = _stored(by_rows)
    assert len(stored) > 1, "the sticky partitioner never moved on"
    assert stored == _stored(by_values)
    assert sum(map(len, stored.values())) == len(values)
    rows_metadata = await _acknowledge_and_read(by_rows, rows_results, 3)
    assert rows_metadata == await _acknowledge_and_read(by_values, value_results, 3)
    for value, meta in zip(values, rows_metadata, strict=True):
        assert (meta.serialized_key_size, meta.serialized_value_size) == (-1, len(value))
        assert stored[meta.partition][meta.offset] == (None, value)


async def test_key_less_rows_keep_null_values_and_their_order() -> None:
    h = Harness(partitioner=DefaultPartitioner(BATCH_SIZE), value_serializer=None)
    h.know_topic(partitions=1)
    pairs: list[Pair] = [(None, None if i % 7 == 0 else b"%03d" % i * 9) for i in range(400)]
    results = _send_rows(h, _rows(pairs, keyless=True))
    assert _stored(h) == {0: pairs}
    metadata = await _acknowledge_and_read(h, results, 1)
    assert [m.offset for m in metadata] == list(range(400))
    assert [m.serialized_value_size for m in metadata] == [
        -1 if v is None else len(v) for _, v in pairs
    ]


async def test_rows_wait_for_an_unknown_topic_the_general_way() -> None:
    h = Harness(partitioner=DefaultPartitioner(BATCH_SIZE), value_serializer=None)
    assert h.appender.append_rows(TOPIC, None, 5, _rows([(b"k", b"v")]), 0, BatchResults()) == 0


async def test_only_the_java_clients_partitioning_takes_rows() -> None:
    plain = Harness(partitioner=DefaultPartitioner(BATCH_SIZE), value_serializer=None)
    assert plain.appender.takes_rows(None, keyless=False) and plain.appender.takes_rows(1, False)
    assert plain.appender.takes_rows(None, keyless=True)
    ignoring = Harness(
        partitioner=DefaultPartitioner(BATCH_SIZE, ignore_keys=True), value_serializer=None
    )
    assert not ignoring.appender.takes_rows(None, False), "a sticky choice hears of each record"
    assert ignoring.appender.takes_rows(0, False)
    assert ignoring.appender.takes_rows(None, True), "key-less rows: sticky per batch anyway"
    round_robin = Harness(partitioner=RoundRobinPartitioner(), value_serializer=None)
    assert not round_robin.appender.takes_rows(None, True), "asked once per record"
    assert round_robin.appender.takes_rows(2, True)
    serializing = Harness(partitioner=DefaultPartitioner(BATCH_SIZE))  # a value serializer
    assert not serializing.appender.takes_rows(None, False)
    assert not serializing.appender.takes_rows(0, True)


def test_rows_of_a_large_chunk_cost_no_object_per_row() -> None:
    # What the path is for: a chunk of rows appended without an object per row living on
    # (the records are bytes in the batches, one part per partition's run).
    pairs = [(os.urandom(8), os.urandom(100)) for _ in range(5000)]
    rows = _rows(pairs)
    builder = RecordBatchBuilder(bytearray(1 << 20))
    places = list(range(5000))
    assert builder.append_rows(5, rows, 0, places, 0, 5000) == 5000
    assert len(builder.pending_parts) == 1


async def test_the_results_of_keyed_rows_keep_no_size_or_place_per_row() -> None:
    # A call's results keep, per run of rows, the lists of places group() made and four
    # numbers per piece: no list grows with the rows until the metadata is asked for.
    pairs = [(b"key-%d" % i, os.urandom(8)) for i in range(20_000)]
    h = Harness(
        buffer_memory=64 << 20, partitioner=DefaultPartitioner(BATCH_SIZE), value_serializer=None
    )
    h.know_topic(partitions=6)
    results = _send_rows(h, _rows(pairs))
    runs = results._runs
    assert runs and sum(run.count for run in runs) + len(results._futures) == len(pairs)
    for run in runs:
        assert run.value_sizes == [] and run.key_sizes is None and run.gaps is None
        assert run.pieces is not None and run.bounds is not None
        assert len(run.bounds) == 3 * len(run.pieces)
        assert run.packed is not None and len(run.packed) == 8 * run.count
    # A piece per partition per round of a chunk of 256 rows: one round, and one more
    # wherever a batch fills up (1 KiB batches here, some 40 rows).
    pieces = sum(len(run.pieces or ()) for run in runs)
    batches = sum(len(h.accumulator.deque_for((TOPIC, p))) for p in range(6))
    assert pieces <= 6 * (-(-len(pairs) // 256) + batches)
    assert pieces < len(pairs) // 5
    # Asked for, the places and sizes are the rows': each record's metadata is where its
    # row was, with its key and value sizes, in the order of the rows.
    metadata = await _acknowledge_and_read(h, results, 6)
    offsets = dict.fromkeys(range(6), 0)
    for (key, value), meta in zip(pairs, metadata, strict=True):
        assert meta.partition == to_positive(murmur2(key)) % 6
        assert meta.offset == offsets[meta.partition]
        offsets[meta.partition] += 1
        assert (meta.serialized_key_size, meta.serialized_value_size) == (len(key), len(value))


async def test_a_split_batch_of_rows_reports_each_rows_metadata_from_its_new_batch() -> None:
    # The broker finds a batch of rows too large: it is split, and its records then need
    # futures, made from the rows (the run kept no sizes), each following its record into
    # the smaller batches; the call's metadata comes from there, in the rows' order.
    from tests.unit import test_sender as sender

    h = sender.Harness(batch_size=4096, linger_ms=0)
    first = h.append(0, b"first")
    pairs: list[Pair] = [(b"k%d" % i, b"%04d" % i * 20) for i in range(40)]
    pairs[7] = (b"k7", None)
    rows = _rows(pairs)
    results = BatchResults([first])
    batch = h.accumulator.open_batch(sender.TOPIC, 0)
    assert batch is not None
    places = list(range(len(pairs)))
    appended = h.accumulator.append_pairs(
        batch, sender.TIMESTAMP, [], 0, places, 0, len(places), results, 1, rows
    )
    assert appended == len(pairs), "the test wants every row in the first batch"
    results.count_to(1 + len(pairs))
    h.step()
    sent = h.last_produce(1)
    assert len(sent.batch(0).records) == 1 + len(pairs)
    h.accumulator.batch_size = 1024
    await h.respond(sent, sender.error(0, sender.MESSAGE_TOO_LARGE))
    assert not results.done()
    seen: list[bytes | None] = []
    base = 300
    for _ in range(1 + len(pairs)):
        h.step()
        request = h.last_produce(1)
        if request is sent or request.reply.done():
            break
        part = request.values(0)
        assert 0 < len(part) < 1 + len(pairs)
        seen.extend(part)
        await h.respond(request, sender.ok(0, base))
        base += len(part)
    assert seen == [b"first"] + [value for _, value in pairs]
    metadata = list(await results)
    assert [meta.offset for meta in metadata] == list(range(300, 300 + 1 + len(pairs)))
    assert [(meta.serialized_key_size, meta.serialized_value_size) for meta in metadata] == [
        (-1, 5)
    ] + [(len(key or b""), -1 if value is None else len(value)) for key, value in pairs]
    assert h.memory_is_back()


async def test_rows_report_the_sizes_they_were_sent_with_if_their_buffer_changes_after() -> None:
    # A writable buffer changed after the call: the records were written as the rows were
    # during the call, and their metadata tells the sizes they were written with.
    offsets = bytearray(b"".join(n.to_bytes(4, "little") for n in (0, 3, 6, 9)))
    values = _spec(pa.array([b"v", b"w", b"x"]))
    rows = arrowcols.BinaryPairs(3, (None, offsets, b"abcdefghi", 0, False), values)
    h = Harness(partitioner=DefaultPartitioner(BATCH_SIZE), value_serializer=None)
    h.know_topic(partitions=1)
    results = BatchResults()
    assert h.appender.append_rows(TOPIC, 0, 5, rows, 0, results) == 3
    assert _stored(h) == {0: [(b"abc", b"v"), (b"def", b"w"), (b"ghi", b"x")]}
    offsets[4:8] = (1).to_bytes(4, "little")
    offsets[8:12] = (5).to_bytes(4, "little")
    assert rows[1] == (b"bcde", b"w")
    metadata = await _acknowledge_and_read(h, results, 1)
    assert [(m.offset, m.serialized_key_size, m.serialized_value_size) for m in metadata] == [
        (0, 3, 1),
        (1, 3, 1),
        (2, 3, 1),
    ]
