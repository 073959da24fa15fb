"""Exponential backoff with jitter: the one policy behind every wait between attempts.

The Java client's ``ExponentialBackoff``, used the same way: the sender's retries
(``retry_backoff_ms`` up to ``retry_backoff_max_ms``, plus or minus 20%, KIP-580), the
reconnects to a broker (``reconnect_backoff_ms`` up to ``reconnect_backoff_max_ms``, plus or
minus 20%), the connection setup timeout (KIP-601) and the transaction coordinator's retries
(no jitter).
"""

from __future__ import annotations

import math
import random

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """Exponential backoff with jitter, as the Java client's ``ExponentialBackoff``.

    The delay after ``attempts`` failures is ``initial * multiplier ** attempts``, scaled by a
    random factor in ``[1 - jitter, 1 + jitter)``, then capped at ``maximum``. Randomness keeps
    many clients that lost the same broker from reconnecting in lockstep. When ``maximum`` is
    not above ``initial`` the delay is ``initial``, without jitter. The unit is the caller's:
    milliseconds for the options named ``*_ms``.

    Args:
        initial_ms: the first delay.
        maximum_ms: the cap (raised to ``initial_ms`` if smaller).
        multiplier: the growth factor per attempt.
        jitter: the relative spread of the random factor (0.2 is plus or minus 20%; 0 for
            none).
        rng: the random source (seed one for reproducible tests).
    """

    def __init__(
        self,
        initial_ms: float,
        maximum_ms: float,
        *,
        multiplier: float = 2.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        self.initial_ms = float(initial_ms)
        self.maximum_ms = float(max(maximum_ms, initial_ms))
        self.multiplier = multiplier
        self.jitter = jitter
        self._rng = rng or random.Random()
        if self.initial_ms > 0 and self.maximum_ms > self.initial_ms and multiplier > 1:
            # Past this many attempts the delay is at the cap anyway; stops the power overflowing.
            self._max_exponent = math.log(self.maximum_ms / self.initial_ms, multiplier)
        else:
            self._max_exponent = 0.0

    def backoff_ms(self, attempts: int) -> float:
        """The delay after ``attempts`` consecutive failures (0 for the first)."""
        if self._max_exponent == 0.0:
            return self.initial_ms
        exponent = min(float(attempts), self._max_exponent)
        delay = self.initial_ms * float(self.multiplier**exponent)
        if self.jitter > 0:
            delay *= self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return min(delay, self.maximum_ms)
