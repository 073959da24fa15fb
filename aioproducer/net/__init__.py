"""The network layer: one pipelined connection per broker and the manager that connects them.

See :mod:`aioproducer.net.connection` for the failure policy.
"""

from __future__ import annotations

from aioproducer.net.connection import (
    BrokerConnection,
    ConnectionManager,
    ConnectionState,
    ExponentialBackoff,
)

__all__ = ["BrokerConnection", "ConnectionManager", "ConnectionState", "ExponentialBackoff"]
