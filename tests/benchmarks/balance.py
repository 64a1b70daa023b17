# SPDX-License-Identifier: Apache-2.0
"""Benchmark of compute-balanced packing: per-pack cost spread and slowest-rank loss vs fill.

Run: ``python tests/benchmarks/balance.py [--lengths PATH] [--pack-size 8192] [--buffer 4096]
[--one-call]``

The lengths (manpages, shuffled with seed 0) are cut into buffers of ``--buffer`` samples and
each buffer is packed on its own, as energon's packing buffer does. For every cost model and
algorithm the table gives fill, the coefficient of variation (CV) of per-pack cost, and the
expected step-time loss from waiting for the slowest of R = 8 ranks
(``E[max of 8 packs' cost] / mean - 1``, 20k seeded draws). ``floor`` is a lower bound on the
CV of any packing with as many packs: documents longer than half a pack need a pack each and
cost at least their own cost, and the rest can at best be spread evenly (water filling).

Two inputs: documents split at the pack size (the issue's setting: every document longer than
the pack becomes full-size chunks, each a pack of its own, which pins the spread), and
documents split at a quarter of the pack size (no pack is pinned, so balancing can work).

The second table is per optimizer step: a rank trains on ``k`` packs per step (micro-batch
size x gradient accumulation), so its step costs the sum of ``k`` consecutive packs of its
stream. It gives the CV of that sum over every window of ``k`` packs (all offsets: a
loader's batches start wherever they start) and the slowest-of-8 loss on those step costs, for
the packing order and for ``step_packs=k`` (:func:`energon_pack.algorithms._step_order.step_order`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _lengths import DEFAULT_LENGTHS

from energon_pack.algorithms import ALGORITHMS, CostModel, pack_lengths, simulate
from energon_pack.algorithms._balance import cost_spread, slowest_rank_loss
from energon_pack.algorithms._overlong import apply_overlong
from energon_pack.algorithms._step_order import step_order

RANKS = 8


def floor_costs(lens: np.ndarray, capacity: int, packs: int, model: CostModel) -> np.ndarray:
    """Water-filled per-pack costs: the most even costs any packing with ``packs`` packs has."""
    doc = model.doc_costs(lens)
    pinned = np.zeros(packs)
    big = np.sort(doc[lens > capacity // 2])[::-1][:packs]
    pinned[: big.size] = big
    total = float(doc.sum())
    level = total / packs
    for k in range(packs):  # pinned is sorted descending
        level = (total - float(pinned[:k].sum())) / (packs - k)
        if pinned[k] <= level:
            break
    return np.maximum(pinned, level)


def measure(
    lens: np.ndarray, capacity: int, buffer: int, model: CostModel, balance: bool
) -> dict[str, float]:
    costs: list[float] = []
    floors: list[float] = []
    packs = 0
    seconds = 0.0
    for start in range(0, lens.size, buffer):
        buf = lens[start : start + buffer]
        t0 = time.perf_counter()
        bins = pack_lengths(
            buf,
            capacity,
            algorithm="best_fit_decreasing_repair" if balance else "best_fit_decreasing",
            balance=model if balance else None,
        )
        seconds += time.perf_counter() - t0
        packs += len(bins)
        costs.extend(model.pack_costs(bins, buf).tolist())
        floors.extend(floor_costs(buf, capacity, len(bins), model).tolist())
    return {
        "packs": packs,
        "fill": 100 * float(lens.sum()) / (packs * capacity),
        "cv": cost_spread(costs),
        "floor": cost_spread(floors),
        "loss": 100 * slowest_rank_loss(costs, ranks=RANKS),
        "seconds": seconds,
    }


def window_sums(costs: np.ndarray, k: int) -> np.ndarray:
    """Sums of every ``k`` consecutive costs (all offsets)."""
    c = np.concatenate(([0.0], np.cumsum(costs)))
    return c[k:] - c[:-k]


def step_rows(lens: np.ndarray, capacity: int, buffer: int, model: CostModel) -> list[str]:
    """Rows of the per-step table for one input (packing order vs step_order)."""
    rows = []
    for algorithm in ("best_fit_decreasing", "balanced"):
        per_buffer = []
        for start in range(0, lens.size, buffer):
            buf = lens[start : start + buffer]
            per_buffer.append(
                model.pack_costs(pack_lengths(buf, capacity, algorithm=algorithm), buf)
            )
        for k in (1, 2, 4, 8):
            base = window_sums(np.concatenate(per_buffer), k)
            ordered = window_sums(np.concatenate([c[step_order(c, k)] for c in per_buffer]), k)
            rows.append(
                f"| {algorithm} | {k} | {cost_spread(base):.4f} | {cost_spread(ordered):.4f} | "
                f"{cost_spread(ordered) / cost_spread(base):.2f} | "
                f"{100 * slowest_rank_loss(base, ranks=RANKS):.2f} | "
                f"{100 * slowest_rank_loss(ordered, ranks=RANKS):.2f} |"
            )
    return rows


def one_call_table(raw: np.ndarray, repeats: int = 5) -> None:
    """``--one-call``: every length in one call (split at the pack size, shuffled with seed 0),
    ``best_fit_decreasing``, the default and ``balanced`` called in turn ``repeats`` times, the
    minimum CPU time of each."""
    names = ("best_fit_decreasing", "best_fit_decreasing_repair", "balanced")
    print("## One call on every length, CPU ms (min of 5 in turn) and x best_fit_decreasing\n")
    print("| pack | lengths | " + " | ".join(f"`{n}` ms (x)" for n in names) + " |")
    print("|---:|---:|---:|---:|---:|")
    for cap in (4096, 8192):
        lens = apply_overlong(raw, cap, "split")
        np.random.default_rng(0).shuffle(lens)
        best = dict.fromkeys(names, float("inf"))
        for _ in range(repeats):
            for name in names:
                t0 = time.process_time()
                ALGORITHMS[name](lens, cap, None)
                best[name] = min(best[name], time.process_time() - t0)
        cells = [f"{1e3 * best[n]:.1f} ({best[n] / best[names[0]]:.1f}x)" for n in names]
        print(f"| {cap} | {lens.size:,} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=Path, default=DEFAULT_LENGTHS)
    parser.add_argument("--pack-size", type=int, default=8192)
    parser.add_argument("--buffer", type=int, default=4096)
    parser.add_argument(
        "--one-call", action="store_true", help="only time one call on every length"
    )
    args = parser.parse_args()
    cap = args.pack_size
    rng = np.random.default_rng(0)
    if args.lengths.exists():
        raw = np.loadtxt(args.lengths, dtype=np.int64)
        source = "manpages"
    else:
        print(
            f"(lengths not found at {args.lengths}, see --lengths: synthetic lognormal lengths instead)"
        )
        raw = rng.lognormal(6.5, 1.2, size=22000).astype(np.int64) + 1
        source = "lognormal"
    if args.one_call:
        print(f"({source} lengths)\n")
        one_call_table(raw)
        return
    models = {
        "d=4096 (default)": CostModel(),
        "d=1024": CostModel(attention=1 / (12 * 1024)),
        "attention only": CostModel(token=0.0, attention=1.0),
    }
    print(f"## Balanced vs best-fit decreasing, {source}, pack {cap}, buffer {args.buffer}\n")
    print(
        "| docs split at | cost model | algorithm | packs | fill % | cost CV | floor CV | "
        f"CV ratio | slowest of {RANKS} loss % | s |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for split in (cap, cap // 4):
        lens = apply_overlong(raw, split, "split")
        rng_split = np.random.default_rng(0)
        rng_split.shuffle(lens)
        for mname, model in models.items():
            base = measure(lens, cap, args.buffer, model, balance=False)
            for label, r in (
                ("best_fit_decreasing", base),
                ("balanced", measure(lens, cap, args.buffer, model, balance=True)),
            ):
                print(
                    f"| {split} | {mname} | {label} | {r['packs']} | {r['fill']:.2f} | "
                    f"{r['cv']:.4f} | {r['floor']:.4f} | {r['cv'] / base['cv']:.2f} | "
                    f"{r['loss']:.2f} | {r['seconds']:.2f} |"
                )
    print()
    for split in (cap, cap // 4):
        lens = apply_overlong(raw, split, "split")
        print(
            f"Docs split at {split}: {int((lens == cap).sum())} documents of exactly {cap} "
            f"tokens (a pack each), {int(((lens > cap // 2) & (lens < cap)).sum())} more longer "
            f"than half a pack (each pins a pack too), {lens.size} documents in all."
        )
    print(f"\n## Steps of k packs per rank, {source}, pack {cap}, buffer {args.buffer}, d=4096\n")
    print(
        f"| algorithm | k | step CV, packing order | step CV, step_order | ratio | "
        f"slowest of {RANKS} loss %, packing order | slowest of {RANKS} loss %, step_order |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for split in (cap, cap // 4):
        lens = apply_overlong(raw, split, "split")
        np.random.default_rng(0).shuffle(lens)
        print(f"| *docs split at {split}* | | | | | | |")
        for row in step_rows(lens, cap, args.buffer, CostModel()):
            print(row)
    print(f"\n## Streaming fill (energon buffer model), {source}, pack {cap}, overlong split\n")
    print("| buffer | algorithm | fill % | per-buffer bound % | select s |")
    print("|---:|---|---:|---:|---:|")
    for name in ("best_fit_decreasing", "balanced"):
        r = simulate(raw, cap, args.buffer, algorithm=name, overlong="split")
        print(
            f"| {args.buffer} | {name} | {100 * r.fill:.2f} | {100 * r.lower_bound_fill:.2f} | "
            f"{r.select_seconds:.2f} |"
        )


if __name__ == "__main__":
    main()
