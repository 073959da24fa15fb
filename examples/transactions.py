"""Write records atomically: commit a transaction, abort one on an exception, commit again.

    python examples/transactions.py [--bootstrap-servers HOST:PORT] [--topic NAME]

A transactional producer (``transactional_id``) sends each batch of related records inside a
transaction: consumers reading with ``isolation.level=read_committed`` see all of them or,
after an abort, none. The records are compressed with zstd on the way.
"""

from __future__ import annotations

import asyncio
import uuid

from _broker import cluster

from aioproducer import Producer


class PaymentDeclined(Exception):
    """A business error in the middle of a transaction."""


async def main(bootstrap_servers: str, topic: str) -> None:
    async with Producer(
        bootstrap_servers=bootstrap_servers,
        transactional_id=f"example-orders-{uuid.uuid4().hex[:8]}",
        compression_type="zstd",
    ) as producer:
        # Commits when the block ends.
        async with producer.transaction():
            for item in ("keyboard", "mouse", "monitor"):
                await producer.send(topic, f"order-1 {item}".encode(), key=b"order-1")
        print("order-1: committed 3 records")

        # An exception inside the block aborts the transaction, then propagates.
        try:
            async with producer.transaction():
                await producer.send(topic, b"order-2 laptop", key=b"order-2")
                raise PaymentDeclined("card declined")
        except PaymentDeclined as exc:
            print(f"order-2: aborted ({exc}); read_committed consumers never see it")

        # The producer goes on with the next transaction; the explicit calls work too.
        await producer.begin_transaction()
        await producer.send(topic, b"order-3 headphones", key=b"order-3")
        await producer.commit_transaction()
        state = producer.transaction_state
        assert state is not None  # None only without a transactional_id
        print(f"order-3: committed 1 record; transaction state {state.name}")


if __name__ == "__main__":
    with cluster("transactions", "Commit, abort and commit again.") as (bootstrap, topic):
        asyncio.run(main(bootstrap, topic))
