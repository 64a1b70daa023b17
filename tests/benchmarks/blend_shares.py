# SPDX-License-Identifier: Apache-2.0
"""Token and document shares per dataset of a 1:1 ``blend:`` metadataset, sample-weighted
(energon's blend) beside size-weighted (``encoder.blend_size = "tokens"``).

Two ``LengthTextEncoder`` datasets: ``short`` (400 documents of 4..64 tokens) and ``long`` (100
of 300..1500, ~90k tokens). Each run reads packs of 2048 tokens until they hold ``--tokens``
real tokens (default 200k: an epoch of ``long`` at 1:1 in tokens), at each ``--workers`` count,
and prints each dataset's share of the tokens and documents trained (read from the packs'
document lengths), ``short``'s share of the loss tokens (from ``PackingCounts``), the token
share's error against the weights, the time taken and ``counts.dataset_tokens``. The third
row per worker count packs each dataset in its own packing group (``short`` in a buffer of 256,
``long`` in a buffer of 8: ``encoder.packing_groups``), the groups' packs blended in tokens.
Figures in docs/howto/blends.md::

    python tests/benchmarks/blend_shares.py --workers 0,2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from energon_pack.samples import PackingCounts
from energon_pack.task_encoders import PackingPolicy
from energon_pack_tools import (
    LengthTextEncoder,
    make_blend_metadataset,
    make_short_long_blend,
    trained_shares,
)

#: The packing groups of the third row: ``short`` in group ``chat``, ``long`` in ``docs``.
GROUPS = {"chat": PackingPolicy(buffer_size=256), "docs": PackingPolicy(buffer_size=8)}


def make_loader(meta: Path, size: Any, workers: int, groups: bool = False) -> Any:
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    encoder = LengthTextEncoder(pack_size=2048, overlong="split")
    encoder.blend_size = size
    if groups:
        encoder.packing_groups = GROUPS
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=1)
    dataset = get_train_dataset(
        str(meta),
        worker_config=worker_config,
        batch_size=None,
        packing_buffer_size=64,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=encoder,
        repeat=True,
    )
    return get_savable_loader(dataset)


def run(
    meta: Path, size: Any, workers: int, tokens: int, groups: bool = False
) -> tuple[Any, Any, int, float]:
    start = time.perf_counter()
    packs, total = [], 0
    for pack in make_loader(meta, size, workers, groups):
        packs.append(pack)
        total += sum(pack.doc_lengths)
        if total >= tokens:
            break
    counts = PackingCounts.total(p.counts for p in packs)
    return trained_shares(packs), counts, len(packs), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0", help="comma-separated num_workers")
    parser.add_argument("--tokens", type=int, default=200_000, help="tokens per run")
    parser.add_argument("--weights", default="1,1", help="short,long blend weights")
    args = parser.parse_args()
    weights = tuple(float(w) for w in args.weights.split(","))
    target = weights[0] / sum(weights)
    with tempfile.TemporaryDirectory() as tmp:
        meta = make_short_long_blend(Path(tmp), weights=(weights[0], weights[1]))
        grouped = make_blend_metadataset(
            Path(tmp) / "groups.yaml",
            [(Path(tmp) / "short", weights[0]), (Path(tmp) / "long", weights[1])],
            ["chat", "docs"],
        )
        print(f"blend short:long = {args.weights}, {args.tokens} tokens per run, pack 2048")
        print(
            "| blend weighs | workers | packs | short tokens | long tokens | short docs "
            "| long docs | short loss tokens | token error | seconds | counts.dataset_tokens |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for workers in (int(w) for w in args.workers.split(",")):
            for size, groups in ((None, False), ("tokens", False), ("tokens", True)):
                path = grouped if groups else meta
                shares, counts, packs, seconds = run(path, size, workers, args.tokens, groups)
                loss = counts.dataset_shares("dataset_loss_tokens")
                error = shares.token_share(0) - target
                print(
                    f"| {(size or 'samples') + (', groups' if groups else '')} | {workers} | {packs} "
                    f"| {shares.token_share(0):.2%} | {shares.token_share(1):.2%} "
                    f"| {shares.document_share(0):.2%} | {shares.document_share(1):.2%} "
                    f"| {loss[0]:.2%} | {error:+.2%} | {seconds:.1f} | {counts.dataset_tokens} |"
                )


if __name__ == "__main__":
    main()
