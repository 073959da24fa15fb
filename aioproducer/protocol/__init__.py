"""The sans-I/O Kafka protocol codec: bytes in, objects out, and back.

Nothing here performs I/O or imports asyncio: the network layer hands frames in and writes
the buffers this package returns.

- :mod:`~aioproducer.protocol.primitives`: the bounds-checked ``Reader`` and writer functions.
- :mod:`~aioproducer.protocol.api`: ``ApiKey``, the ``Request``/``Response`` bases, header rules.
- :mod:`~aioproducer.protocol.error_codes`: ``ErrorCode``, the table of Kafka error codes.
- :mod:`~aioproducer.protocol.framing`: request framing and response headers.
- :mod:`~aioproducer.protocol.messages`: requests and responses, version-neutral.
- :mod:`~aioproducer.protocol.compression`: gzip, snappy, lz4 and zstd as Kafka writes them.
- :mod:`~aioproducer.protocol.record_batch`: the record batch v2 builder (the hot path).
- :mod:`~aioproducer.protocol.record_reader`: record batch v2 decoding.
"""
