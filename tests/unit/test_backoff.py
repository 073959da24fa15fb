"""The one exponential backoff: retries, reconnects and coordinator requests all use it."""

from __future__ import annotations

import random

import aioproducer.net
from aioproducer._core.backoff import ExponentialBackoff


def test_without_jitter_the_delay_doubles_exactly_up_to_the_cap() -> None:
    # The transaction manager's coordinator retries: retry_backoff_ms doubling, no jitter.
    backoff = ExponentialBackoff(100, 1000, jitter=0.0)
    assert [backoff.backoff_ms(n) for n in range(6)] == [100, 200, 400, 800, 1000, 1000]
    assert backoff.backoff_ms(10_000) == 1000


def test_jitter_spreads_the_delay_twenty_percent_either_way_below_the_cap() -> None:
    backoff = ExponentialBackoff(100, 10_000, rng=random.Random(3))
    delays = [backoff.backoff_ms(2) for _ in range(200)]
    assert all(320 <= delay < 480 for delay in delays)
    assert min(delays) < 340 and max(delays) > 460


def test_a_cap_not_above_the_first_delay_makes_it_fixed() -> None:
    assert ExponentialBackoff(50, 50).backoff_ms(10) == 50
    assert ExponentialBackoff(500, 100).backoff_ms(3) == 500
    assert ExponentialBackoff(0, 1000).backoff_ms(5) == 0


def test_the_connection_package_names_the_same_class() -> None:
    assert aioproducer.net.ExponentialBackoff is ExponentialBackoff
