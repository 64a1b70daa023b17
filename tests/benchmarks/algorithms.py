# SPDX-License-Identifier: Apache-2.0
"""Benchmark of the packing algorithms: fill vs the lower bound, and time per call.

Run: ``python tests/benchmarks/algorithms.py [--lengths PATH] [--quick] [--only carry-over]``

Tables:
1. per algorithm and input size (64 / 1k / 10k / 100k lengths): packs above ``ceil(sum/C)``,
   fill, bound fill, milliseconds per call, on the manpages lengths (docs split at the pack size,
   shuffled with seed 0) and on synthetic uniform / lognormal / bimodal lengths;
2. the streaming fill at buffers 2048 / 4096 / 8192 at pack size 4096 (energon's buffer model);
3. carry-over at buffers 16 / 64 / 256 (manpages, pack 4096, split);
4. ``--only per-buffer-cost`` (not in the default run): the default vs ``best_fit_decreasing``
   per call on energon-sized buffers of 16 / 64 / 256 manpages lengths, on 50 buffers that BFD
   packs at ``ceil(sum/C)`` and averaged over every buffer.

Times are CPU time of this process (``time.process_time``), the minimum over repeats: other
jobs on a shared machine inflate wall-clock times, CPU time much less so.
"""

from __future__ import annotations

import argparse
import time
import timeit
from pathlib import Path

import numpy as np
from _lengths import DEFAULT_LENGTHS

from energon_pack.algorithms import ALGORITHMS, CarryOver, pack_lengths, simulate
from energon_pack.algorithms._bounds import lower_bound
from energon_pack.algorithms._overlong import apply_overlong

C = 4096


def manpages(path: Path, rng: np.random.Generator) -> np.ndarray:
    """The manpages lengths split at the pack size, shuffled with ``rng``."""
    raw = apply_overlong(np.loadtxt(path, dtype=np.int64), C, "split")
    rng.shuffle(raw)
    return raw


def datasets(path: Path, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}
    if path.exists():
        out["manpages"] = np.resize(manpages(path, rng), n)
    else:
        print(f"(manpages lengths not found at {path}, see --lengths: synthetic inputs only)")
    out["uniform"] = rng.integers(1, C + 1, size=n)
    out["lognormal"] = np.clip(rng.lognormal(6.5, 1.0, size=n).astype(np.int64), 1, C)
    out["bimodal"] = np.where(
        rng.random(n) < 0.7, rng.integers(50, 400, size=n), rng.integers(2000, C + 1, size=n)
    )
    return out


def best_time(fn, repeats: int) -> float:
    """Minimum CPU time of ``fn()`` over ``repeats`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


REPEATS = {64: 300, 1_000: 30, 10_000: 9, 100_000: 3}
#: Timed once at 10k and 100k lengths (seconds per call; they are not meant for those sizes).
SLOW = {"first_fit", "balanced"}


def per_call_table(data: dict[str, np.ndarray], sizes: list[int]) -> None:
    """Table 1: packs above the bound, fill and min CPU ms per call, per algorithm and size."""
    print(f"## Per call, capacity {C}: packs above ceil(sum/C), fill, min CPU ms per call\n")
    print("| data | algorithm | n | packs | +over bound | fill % | bound fill % | ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for dname, arr in data.items():
        for name in ALGORITHMS:
            for n in sizes:
                x = arr[:n]
                bins = pack_lengths(x, C, algorithm=name)
                lb = lower_bound(x, C)
                reps = 1 if name in SLOW and n >= 10_000 else REPEATS[n]
                ms = (
                    best_time(lambda x=x, name=name: pack_lengths(x, C, algorithm=name), reps) * 1e3
                )
                tok = int(x.sum())
                print(
                    f"| {dname} | {name} | {n} | {len(bins)} | {len(bins) - lb} | "
                    f"{100 * tok / (len(bins) * C):.2f} | {100 * tok / (lb * C):.2f} | {ms:.3g} |"
                )


def streaming_table(raw: np.ndarray) -> None:
    """Table 2: the streaming fill at buffers 2048 / 4096 / 8192 (energon's buffer model)."""
    print(f"\n## Streaming (energon buffer model), manpages, pack {C}, overlong split\n")
    print("| buffer | algorithm | fill % | per-buffer bound % | gap (points) | select s |")
    print("|---:|---|---:|---:|---:|---:|")
    for buf in (2048, 4096, 8192):
        for name in ALGORITHMS:
            r = simulate(raw, C, buf, algorithm=name, overlong="split")
            gap = 100 * (r.lower_bound_fill - r.fill)
            print(
                f"| {buf} | {name} | {100 * r.fill:.2f} | {100 * r.lower_bound_fill:.2f} | "
                f"{gap:.2f} | {r.select_seconds:.2f} |"
            )


def carry_over_table(raw: np.ndarray) -> None:
    """Table 3: carry-over off vs the default ``CarryOver()`` at buffers 16 / 64 / 256."""
    print(f"\n## Carry-over, manpages, pack {C}, overlong split, default algorithm\n")
    print("| buffer | carry-over | fill % | packs | max age | max wait (samples) |")
    print("|---:|---|---:|---:|---:|---:|")
    for buf in (16, 64, 256):
        for cfg in (None, CarryOver()):
            r = simulate(raw, C, buf, carry_over=cfg, overlong="split")
            label = "off" if cfg is None else repr(cfg).replace("CarryOver", "")
            print(
                f"| {buf} | {label} | {100 * r.fill:.2f} | {r.packs} | {r.max_age} | "
                f"{r.max_wait_samples} |"
            )


def per_buffer_cost_table(lens: np.ndarray, at_bound: int = 50, repeats: int = 7) -> None:
    """Table 4: the default vs BFD per call (the registry's functions on int64 arrays) on full
    buffers of the split, shuffled manpages lengths; min CPU time of ``repeats`` timeit runs."""
    default, bfd = ALGORITHMS["best_fit_decreasing_repair"], ALGORITHMS["best_fit_decreasing"]

    def us(bufs: list[np.ndarray], number: int) -> tuple[float, ...]:
        """Per-call us of the default and of BFD, their timeit repeats interleaved."""
        timers = [
            timeit.Timer(lambda f=f: [f(b, C) for b in bufs], timer=time.process_time)
            for f in (default, bfd)
        ]
        runs = [[t.timeit(number) for t in timers] for _ in range(repeats)]
        return tuple(1e6 * min(r) / (number * len(bufs)) for r in zip(*runs))

    print(f"\n## Per buffer, manpages, pack {C}, overlong split: default vs BFD, CPU us per call\n")
    print(
        f"| buffer | buffers | BFD above ceil(sum/C) % | packs saved | default / BFD us, "
        f"{at_bound} at the bound | x | default / BFD us, all buffers | x |"
    )
    print("|---:|---:|---:|---:|---|---:|---|---:|")
    for size in (16, 64, 256):
        bufs = [lens[i : i + size] for i in range(0, lens.size - size + 1, size)]
        over = [len(bfd(b, C)) > lower_bound(b, C) for b in bufs]
        saved = sum(len(bfd(b, C)) - len(default(b, C)) for b in bufs)
        met = [b for b, o in zip(bufs, over) if not o][:at_bound]
        d_met, b_met = us(met, max(1, 2048 // size))
        d_all, b_all = us(bufs, 1)
        print(
            f"| {size} | {len(bufs)} | {100 * sum(over) / len(bufs):.1f} | {saved} | "
            f"{d_met:.2f} / {b_met:.2f} | {d_met / b_met:.2f} | {d_all:.2f} / {b_all:.2f} | "
            f"{d_all / b_all:.2f} |"
        )


SECTIONS = ("per-call", "streaming", "carry-over", "per-buffer-cost")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", type=Path, default=DEFAULT_LENGTHS)
    parser.add_argument("--quick", action="store_true", help="skip 100k lengths")
    parser.add_argument(
        "--only",
        choices=SECTIONS,
        help="print one table only (the whole run takes minutes; per-buffer-cost only so)",
    )
    args = parser.parse_args()
    if args.only == "per-buffer-cost" and args.lengths.exists():
        per_buffer_cost_table(manpages(args.lengths, np.random.default_rng(0)))
        return
    if args.only in (None, "per-call"):
        sizes = [64, 1_000, 10_000] if args.quick else [64, 1_000, 10_000, 100_000]
        per_call_table(datasets(args.lengths, max(sizes)), sizes)
    if not args.lengths.exists():
        print(
            f"(manpages lengths not found at {args.lengths}, see --lengths: no streaming or carry-over tables)"
        )
        return
    raw = np.loadtxt(args.lengths, dtype=np.int64)
    if args.only in (None, "streaming"):
        streaming_table(raw)
    if args.only in (None, "carry-over"):
        carry_over_table(raw)


if __name__ == "__main__":
    main()
