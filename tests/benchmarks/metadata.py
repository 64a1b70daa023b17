# SPDX-License-Identifier: Apache-2.0
"""Benchmark: time to build one 8k-token pack of 16 documents and its attention metadata.

Bar (issue 3): building the metadata of an 8k pack of 16 documents takes <= 200 us.
Run: ``python tests/benchmarks/metadata.py [--pack-size 8192] [--docs 16] [--repeat 2000]``.
Prints the median and p90 per step, single-threaded (torch.set_num_threads(1)).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch

from energon_pack.attention import document_metadata
from energon_pack.attention._flex import block_causal_block_mask
from energon_pack.samples import EncodedSample, collate_packs, pack_documents


def _lengths(pack_size: int, docs: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, pack_size), docs - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, pack_size])]


def _time(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    for _ in range(min(50, repeat)):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * len(samples))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack-size", type=int, default=8192)
    parser.add_argument("--docs", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    lengths = _lengths(args.pack_size, args.docs, seed=0)
    docs = [
        EncodedSample(
            __key__=f"doc{i}",
            __restore_key__=(),
            tokens=torch.randint(0, 32000, (n,)),
            loss_mask=torch.ones(n, dtype=torch.bool),
        )
        for i, n in enumerate(lengths)
    ]
    pack = pack_documents(docs)
    packs = [pack] * 8
    meta = document_metadata([lengths], length=args.pack_size)

    def whole_metadata(rows: list[list[int]]) -> None:
        """The metadata with every per-token field read (they are computed when read)."""
        meta = document_metadata(rows, length=args.pack_size)
        for name in ("position_ids", "segment_ids", "document_borders", "seq_idx"):
            getattr(meta, name)

    def adapters() -> None:
        fresh = collate_packs(packs, pad_to=args.pack_size)  # nothing computed yet
        fresh.flash_attn_kwargs()
        fresh.packed_seq_params()
        fresh.hf_kwargs("flash_attention_2", config=None)

    def pack_and_metadata() -> None:
        whole_metadata([pack_documents(docs).doc_lengths])

    rows = [
        ("pack_documents (tokens, loss mask)", lambda: pack_documents(docs)),
        ("pack_documents, alignment=8", lambda: pack_documents(docs, alignment=8)),
        ("document_metadata (1 row, every field read)", lambda: whole_metadata([lengths])),
        ("pack_documents + document_metadata  [bar]", pack_and_metadata),
        ("collate_packs (1 pack, pad_to)", lambda: collate_packs([pack], pad_to=args.pack_size)),
        ("collate_packs (8 packs, pad_to)", lambda: collate_packs(packs, pad_to=args.pack_size)),
        ("collate (8 packs) + flash, THD, HF flash kwargs", adapters),
        ("block_mask (FlexAttention, 128 tiles)", lambda: block_causal_block_mask(meta.seq_idx)),
    ]
    print(f"pack_size={args.pack_size} docs={args.docs} repeat={args.repeat} threads=1")
    print(f"{'step':<46} {'median us':>10} {'p90 us':>10}")
    print("-" * 68)
    medians = {}
    for name, fn in rows:
        med, p90 = _time(fn, args.repeat)
        medians[fn] = med
        print(f"{name:<46} {med:>10.1f} {p90:>10.1f}")
    med = medians[pack_and_metadata]  # the [bar] row above, not a second (noisier) timing
    print("-" * 68)
    print(f"bar: pack + metadata <= 200 us: {'PASS' if med <= 200 else 'FAIL'} ({med:.1f} us)")


if __name__ == "__main__":
    main()
