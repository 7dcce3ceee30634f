"""Seeded randomness: each resource of each account draws from its own `random.Random`."""

from __future__ import annotations

import random
from typing import Any


def stream(seed: int, size: str, account_id: int, resource: str) -> random.Random:
    return random.Random(f"{seed}:{size}:{account_id}:{resource}")


def pick(rng: random.Random, options: list[Any] | tuple[Any, ...]) -> Any:
    return options[int(rng.random() * len(options))]
