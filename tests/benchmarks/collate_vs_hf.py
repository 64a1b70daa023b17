# SPDX-License-Identifier: Apache-2.0
"""Collate plus metadata per batch: energon-pack vs transformers' ``DataCollatorWithFlattening``.

Issue 16, item 3: "collate plus metadata per batch at least as fast as transformers'
``DataCollatorWithFlattening`` on the same documents (measure side by side in one process)".

Documents: the manpages lengths (``--lengths PATH``, shuffled with seed 0,
truncated at the pack size) or synthetic short documents (log-normal, median 26 tokens), random
token ids. The documents are grouped into packs once (``pack_lengths``, the default algorithm;
planning is not timed: the HF collator does not plan), 8 packs per batch. Per batch, timed:

* ``energon-pack``: ``PackedTextSample.from_documents`` for each of the 8 packs, then
  ``collate_packs(pad_to=pack)``: ``(8, pack)`` tokens and labels plus ``cu_seqlens*``,
  then ``batch.flash_attn_kwargs()`` (the ``cu_seqlens``/``max_seqlen`` a varlen kernel
  takes), ``batch.position_ids`` and ``batch.seq_idx`` (computed when read);
* ``HF (lists)``: ``DataCollatorWithFlattening(return_flash_attn_kwargs=True,
  return_position_ids=True, return_seq_idx=True)`` on the same documents as
  ``{"input_ids": list[int]}`` (a ``datasets`` row), one ``(1, tokens)`` row;
* ``HF (tensors)``: the same with ``input_ids`` as int64 tensors (a torch dataset).

Before timing, the script checks that both give the same tokens, position ids, ``cu_seqlens``
and targets (HF labels are energon's aligned labels shifted right by one). Method: one process,
one thread (``torch.set_num_threads(1)``), the three collators called in turn on each batch (a
round visits every batch), ``--rounds`` rounds after one warm-up round; median and p90 of the
per-batch times in milliseconds, and the ratio of medians.

    python tests/benchmarks/collate_vs_hf.py [--corpus manpages|short] [--packs 4096,8192]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _lengths import DEFAULT_LENGTHS
from transformers import DataCollatorWithFlattening

from energon_pack.algorithms import pack_lengths
from energon_pack.samples import EncodedSample, PackedTextSample, collate_packs

PACKS_PER_BATCH = 8


def corpus_lengths(corpus: str, pack_size: int, n: int, path: Path) -> np.ndarray:
    """``n`` document lengths truncated at ``pack_size``, shuffled with seed 0."""
    rng = np.random.default_rng(0)
    if corpus == "short":
        raw = np.maximum(1, np.round(np.exp(rng.normal(np.log(26), 1.0, n)))).astype(np.int64)
    else:
        raw = np.loadtxt(path, dtype=np.int64)
        raw = raw[rng.permutation(raw.size)][:n]
    return np.minimum(raw, pack_size)


def make_batches(lengths: np.ndarray, pack_size: int, batches: int) -> list[list[list[int]]]:
    """``batches`` batches of 8 packs, each pack a list of document lengths; the packs are
    drawn at random (seed 0) from all packs of the corpus, as a shuffled loader delivers them."""
    bins = pack_lengths(lengths, pack_size)
    order = np.random.default_rng(0).permutation(len(bins))
    packs = [[int(lengths[i]) for i in bins[j]] for j in order]
    need = batches * PACKS_PER_BATCH
    if len(packs) < need:
        raise SystemExit(f"only {len(packs)} packs, need {need}: lower --batches")
    return [packs[i : i + PACKS_PER_BATCH] for i in range(0, need, PACKS_PER_BATCH)]


def documents(batch: list[list[int]], rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Random token ids for each document of each pack."""
    return [[rng.integers(5, 30000, size=n, dtype=np.int64) for n in pack] for pack in batch]


def energon_inputs(batch_tokens: list[list[np.ndarray]]) -> list[list[EncodedSample]]:
    return [
        [
            EncodedSample(
                __key__=f"d{r}_{i}",
                __restore_key__=(),
                tokens=torch.from_numpy(t),
                loss_mask=torch.ones(t.size, dtype=torch.bool),
            )
            for i, t in enumerate(pack)
        ]
        for r, pack in enumerate(batch_tokens)
    ]


def energon_collate(packs: list[list[EncodedSample]], pack_size: int):
    batch = collate_packs([PackedTextSample.from_documents(p) for p in packs], pad_to=pack_size)
    # what HF's collator returns: the varlen kwargs, position ids and seq_idx (computed on read)
    return batch, batch.flash_attn_kwargs(), batch.position_ids, batch.seq_idx


def check_same(packs, hf_out: dict, pack_size: int) -> None:
    """Both sides hold the same documents, positions, cu_seqlens and targets."""
    batch = energon_collate(packs, pack_size)[0]
    real = batch.segment_ids.view(-1) > 0
    assert torch.equal(batch.tokens.view(-1)[real], hf_out["input_ids"][0])
    assert torch.equal(batch.position_ids.view(-1)[real], hf_out["position_ids"][0])
    assert torch.equal(batch.cu_seqlens, hf_out["cu_seq_lens_q"])
    ours = batch.labels.view(-1)[real]
    shifted = torch.cat([torch.tensor([-100]), ours[:-1]])
    assert torch.equal(shifted, hf_out["labels"][0])
    seq = hf_out["seq_idx"][0]
    assert torch.equal(batch.seq_idx.view(-1)[real], seq.to(batch.seq_idx.dtype))


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[int(0.9 * len(ordered))]


def run(corpus: str, pack_size: int, batches: int, rounds: int, path: Path) -> None:
    lengths = corpus_lengths(corpus, pack_size, 200_000 if corpus == "short" else 22_135, path)
    rng = np.random.default_rng(1)
    plans = make_batches(lengths, pack_size, batches)
    tokens = [documents(b, rng) for b in plans]
    ours = [energon_inputs(t) for t in tokens]
    as_lists = [[{"input_ids": d.tolist()} for pack in t for d in pack] for t in tokens]
    as_tensors = [[{"input_ids": torch.from_numpy(d)} for pack in t for d in pack] for t in tokens]
    hf = DataCollatorWithFlattening(
        return_flash_attn_kwargs=True, return_position_ids=True, return_seq_idx=True
    )
    check_same(ours[0], hf(as_lists[0]), pack_size)
    contenders = {
        "energon-pack": lambda k: energon_collate(ours[k], pack_size),
        "HF (lists)": lambda k: hf(as_lists[k]),
        "HF (tensors)": lambda k: hf(as_tensors[k]),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for rnd in range(rounds + 1):
        for k in range(batches):
            for name, fn in contenders.items():
                t0 = time.perf_counter()
                fn(k)
                elapsed = (time.perf_counter() - t0) * 1e3
                if rnd:  # round 0 warms up
                    times[name].append(elapsed)
    docs = sum(len(p) for b in plans for p in b) / batches
    fill = sum(sum(p) for b in plans for p in b) / (batches * PACKS_PER_BATCH * pack_size)
    ref, _ = summary(times["energon-pack"])
    print(
        f"\n{corpus}, pack {pack_size}, {PACKS_PER_BATCH} packs per batch: {docs:.0f} documents "
        f"per batch on average, fill {fill:.2%}; {batches} batches x {rounds} rounds\n"
    )
    print("| collator | median ms | p90 ms | median / energon-pack |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        med, p90 = summary(values)
        print(f"| {name} | {med:.3f} | {p90:.3f} | {med / ref:.2f}x |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("manpages", "short"), default="manpages")
    parser.add_argument(
        "--lengths", type=Path, default=DEFAULT_LENGTHS, help="manpages lengths file, one per line"
    )
    parser.add_argument("--packs", default="4096,8192", help="pack sizes, comma-separated")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    if args.corpus == "manpages" and not args.lengths.exists():
        print(f"{args.lengths} not found: pass --lengths PATH or run with --corpus short.")
        return 1
    torch.set_num_threads(1)
    for pack_size in (int(p) for p in args.packs.split(",")):
        run(args.corpus, pack_size, args.batches, args.rounds, args.lengths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
