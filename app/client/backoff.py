"""The client's one retry backoff: Kafka's `retry.backoff.ms` / `retry.backoff.max.ms` (KIP-580).

    backoff(attempts) = min(max_ms, initial_ms * 2 ** attempts * uniform(0.8, 1.2))

`attempts` counts the failures before this one (0 for the first retry), so with Kafka's
defaults the pauses are about 100, 200, 400, 800, 1000, 1000 … ms. The exponent stops growing
once the cap is reached (Kafka's `expMax`), so the jitter keeps spreading the capped pauses
below the cap; an initial backoff above the cap means a constant pause of the cap, as in
Kafka. The jitter keeps clients that failed together from retrying in lockstep.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

# Kafka's CommonClientConfigs: DEFAULT_RETRY_BACKOFF_MS, DEFAULT_RETRY_BACKOFF_MAX_MS,
# RETRY_BACKOFF_EXP_BASE, RETRY_BACKOFF_JITTER.
DEFAULT_RETRY_BACKOFF_MS = 100
DEFAULT_RETRY_BACKOFF_MAX_MS = 1000
RETRY_BACKOFF_EXP_BASE = 2
RETRY_BACKOFF_JITTER = 0.2


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    initial_ms: float = DEFAULT_RETRY_BACKOFF_MS
    max_ms: float = DEFAULT_RETRY_BACKOFF_MAX_MS
    multiplier: int = RETRY_BACKOFF_EXP_BASE
    jitter: float = RETRY_BACKOFF_JITTER
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.initial_ms < 0 or self.max_ms < 0:
            raise ValueError(
                f"retry_backoff_ms ({self.initial_ms}) and retry_backoff_max_ms ({self.max_ms}) must be >= 0"
            )
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter}")

    def backoff_ms(self, attempts: int) -> float:
        """The pause before retry number `attempts + 1`."""
        initial = min(self.initial_ms, self.max_ms)
        if initial >= self.max_ms or initial <= 0:
            return initial
        exp_max = math.log(self.max_ms / initial, self.multiplier)
        term = initial * self.multiplier ** min(attempts, exp_max)
        factor = self.rng.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else 1.0
        return min(term * factor, self.max_ms)

    def backoff_s(self, attempts: int) -> float:
        return self.backoff_ms(attempts) / 1000
