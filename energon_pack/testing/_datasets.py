# SPDX-License-Identifier: Apache-2.0
"""Tiny, real energon datasets for tests and examples (tar shards + ``energon prepare``).

Deterministic texts for tests; the writers and the loader come from :mod:`energon_pack.tools`
and are re-exported by :mod:`energon_pack.testing`::

    >>> texts = synthetic_texts(4, seed=0, min_words=1, max_words=3)  # doctest: +SKIP
    >>> make_text_dataset(tmp / "text", texts, samples_per_shard=2)    # doctest: +SKIP
    # tmp/text/shard_000000.tar: 000000.txt 000001.txt
    # tmp/text/shard_000001.tar: 000002.txt 000003.txt
    # tmp/text/.nv-meta/{dataset.yaml, split.yaml, .info.json, index.sqlite, index.uuid}

Sample keys are ``f"{i:06d}"`` so a test can check which source samples made it into a pack.
:func:`make_loader` builds the savable loader that the contract tests use (``repeat`` and
``num_workers`` explicit, checkpointing after every sample so save/restore is exact and fast).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["WORDS", "synthetic_texts"]

#: The vocabulary of :func:`synthetic_texts` (also what the test tokenizer is trained on).
WORDS: tuple[str, ...] = tuple(
    "the a of to and in is it that on for with as was by at from this be are or an which one "
    "packing energon token sample image caption model train buffer shard worker state restore "
    "loss label position document sequence attention kernel batch epoch seed random data".split()
)


def synthetic_texts(
    n: int, *, seed: int = 0, min_words: int = 1, max_words: int = 40, words: Sequence[str] = WORDS
) -> list[str]:
    """``n`` deterministic sentences of ``min_words..max_words`` words drawn from ``words``."""
    if n < 0 or min_words < 0 or max_words < min_words:
        raise ValueError(
            f"need n >= 0 and 0 <= min_words <= max_words, got {n}, {min_words}, {max_words}"
        )
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(min_words, max_words)))
        for _ in range(n)
    ]
