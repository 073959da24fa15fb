"""aioproducer: an asyncio-native Apache Kafka producer.

The public names are listed in ``__all__``; errors live in :mod:`aioproducer.errors`.
"""

from __future__ import annotations

from aioproducer._core.delivery import DeliveredMessage
from aioproducer._core.futures import BatchResults, RecordFuture
from aioproducer.admin import (
    NewTopic,
    PartitionDescription,
    TopicAdmin,
    TopicCreation,
    TopicDescription,
)
from aioproducer.config import ProducerConfig
from aioproducer.metric_catalog import Metric
from aioproducer.oauth import ClientCredentialsTokenProvider, UnsecuredTokenProvider
from aioproducer.producer import Producer, ProducerState
from aioproducer.properties import read_properties
from aioproducer.records import (
    ConsumerGroupMetadata,
    Header,
    PreparedTransaction,
    ProducerRecord,
    RecordMetadata,
    RecordMetadataSequence,
    TimestampType,
    TransactionState,
)
from aioproducer.serialization import Serializer
from aioproducer.shutdown import StopSignal, stop_on_signals
from aioproducer.sync import SyncProducer
from aioproducer.two_phase import (
    TransactionDescription,
    TransactionListing,
    complete_prepared_transaction,
    describe_transactions,
    fetch_committed_offsets,
    list_transactions,
)

__version__ = "0.1.0"

__all__ = [
    "BatchResults",
    "ClientCredentialsTokenProvider",
    "ConsumerGroupMetadata",
    "DeliveredMessage",
    "Header",
    "Metric",
    "NewTopic",
    "PartitionDescription",
    "PreparedTransaction",
    "Producer",
    "ProducerConfig",
    "ProducerRecord",
    "ProducerState",
    "RecordFuture",
    "RecordMetadata",
    "RecordMetadataSequence",
    "Serializer",
    "StopSignal",
    "SyncProducer",
    "TimestampType",
    "TopicAdmin",
    "TopicCreation",
    "TopicDescription",
    "TransactionDescription",
    "TransactionListing",
    "TransactionState",
    "UnsecuredTokenProvider",
    "__version__",
    "complete_prepared_transaction",
    "describe_transactions",
    "fetch_committed_offsets",
    "list_transactions",
    "read_properties",
    "stop_on_signals",
]
