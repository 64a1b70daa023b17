# SPDX-License-Identifier: Apache-2.0
"""Carry-over packing through a real energon loader vs ``energon-pack simulate``.

Reads the manpages lengths (``--lengths PATH``; 22,135 real token counts), shuffles it with a fixed
seed, splits documents longer than the pack, and writes an energon ``TextSample`` dataset whose
sample ``i`` holds its length as text (packing decisions depend only on lengths, so a "virtual"
document of that many tokens exercises exactly the loader's decision path: reading, buffers,
selection, carry-over, state). For each buffer size it prints the fill of

* ``simulate``: :func:`energon_pack.algorithms.simulate` on the shuffled lengths (file order),
* ``loader``: the real energon loader (``num_workers=0``, ``repeat=False``) with the product's
  ``PackingTaskEncoder(carry_over=...)`` (:class:`~energon_pack_tools._encoders.LengthTextEncoder`),
* ``replay``: ``simulate`` on the order in which energon actually read the samples (must equal
  the loader's packs exactly: same planning code),

with and without carry-over, the largest age (times a sample was carried) the loader saw, and
the longest wait (samples read between a sample's read and its pack's emission, from the replay).

    python tests/benchmarks/carry_over_loader.py [--buffers 16,64,256] [--limit N]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _lengths import DEFAULT_LENGTHS

from energon_pack.algorithms import CarryOver, simulate
from energon_pack.algorithms._overlong import apply_overlong
from energon_pack.training import make_loader
from energon_pack_tools import LengthTextEncoder, make_text_dataset

PACK_SIZE = 4096


def run_loader(path: Path, buffer: int, algorithm: str, carry: CarryOver | None):
    # The product's PackingTaskEncoder with carry_over; it records every buffer it packs.
    encoder = LengthTextEncoder(pack_size=PACK_SIZE, algorithm=algorithm, carry_over=carry)
    start = time.perf_counter()
    packs = list(make_loader(path, encoder, packing_buffer_size=buffer))
    seconds = time.perf_counter() - start
    seen: dict[str, int] = {}
    order: list[str] = []
    for buf in encoder.selections:
        for key in buf:
            if key not in seen:
                order.append(key)
            seen[key] = seen.get(key, 0) + 1
    max_age = max(seen.values()) - 1 if seen else 0
    return packs, order, max_age, seconds


def fill_of(packs) -> float:
    return sum(sum(p.doc_lengths) for p in packs) / (len(packs) * PACK_SIZE)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lengths", type=Path, default=DEFAULT_LENGTHS, help="manpages lengths file, one per line"
    )
    parser.add_argument("--buffers", default="16,64,256")
    parser.add_argument("--algorithm", default="best_fit_decreasing")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N documents")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.lengths.exists():
        print(
            f"{args.lengths} not found: this benchmark needs the manpages lengths (--lengths PATH)."
        )
        return 1
    raw = np.loadtxt(args.lengths, dtype=np.int64)
    raw = raw[np.random.default_rng(args.seed).permutation(raw.size)]
    if args.limit:
        raw = raw[: args.limit]
    lengths = apply_overlong(raw, PACK_SIZE, "split")
    config = CarryOver()
    print(
        f"{raw.size} documents -> {lengths.size} samples after splitting at {PACK_SIZE}; "
        f"algorithm {args.algorithm}; {config}; global bound "
        f"{lengths.sum() / (math.ceil(lengths.sum() / PACK_SIZE) * PACK_SIZE):.2%}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = make_text_dataset(
            Path(tmp) / "manpages", [str(n) for n in lengths.tolist()], samples_per_shard=1000
        )
        print(f"dataset written and prepared in {time.perf_counter() - t0:.1f} s\n")
        by_key = {f"{i:06d}": int(n) for i, n in enumerate(lengths.tolist())}
        header = (
            f"{'buffer':>6} {'carry':>5} {'simulate':>9} {'loader':>8} {'diff':>6} "
            f"{'replay==':>8} {'packs':>6} {'max age':>7} {'max wait':>8} {'loader s':>8}"
        )
        print(header)
        print("-" * len(header))
        for buffer in [int(b) for b in args.buffers.split(",")]:
            for carry in (None, config):
                sim = simulate(
                    lengths, PACK_SIZE, buffer, algorithm=args.algorithm, carry_over=carry
                )
                packs, order, max_age, seconds = run_loader(path, buffer, args.algorithm, carry)
                replay = simulate(
                    [by_key[k] for k in order],
                    PACK_SIZE,
                    buffer,
                    algorithm=args.algorithm,
                    carry_over=carry,
                )
                assert sorted(k for p in packs for k in p.sample_keys) == sorted(by_key)
                loader_fill = fill_of(packs)
                print(
                    f"{buffer:>6} {'on' if carry else 'off':>5} {sim.fill:>9.2%} "
                    f"{loader_fill:>8.2%} {100 * (loader_fill - sim.fill):>+6.2f} "
                    f"{str(replay.packs == len(packs)):>8} {len(packs):>6} "
                    f"{max_age if carry else 0:>7} {replay.max_wait_samples:>8} {seconds:>8.1f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
