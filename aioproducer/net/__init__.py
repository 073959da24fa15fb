"""The network layer: one pipelined connection per broker and the manager that connects them.

See :mod:`aioproducer.net.connection` and :mod:`aioproducer.protocol.session` for the failure
policy.
"""

from __future__ import annotations

from aioproducer._core.backoff import ExponentialBackoff
from aioproducer.net.connection import BrokerConnection, ConnectionState
from aioproducer.net.manager import ConnectionManager

__all__ = ["BrokerConnection", "ConnectionManager", "ConnectionState", "ExponentialBackoff"]
