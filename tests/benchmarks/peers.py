# SPDX-License-Identifier: Apache-2.0
"""energon-pack vs the peers' streaming and per-buffer packers: fill and time in one run.

For each corpus, pack size (4096, 8192) and buffer (16, 64, 256, 2048) it prints the fill
(real tokens / pack slots, in %) and the time of

* ``stock``: :func:`energon_pack.algorithms.simulate` with the default algorithm, no carry-over;
* ``carry``: the same with ``carry_over=CarryOver()``, i.e. ``energon-pack simulate --carry-over``
  with no other flag;
* ``grain FF`` / ``grain BF``: grain's ``FirstFitPackIterDataset`` / ``BestFitPackIterDataset``
  (``grain.experimental``, the installed package) with ``num_packing_bins`` = the buffer;
* ``TRL bfd``: TRL's ``pack_dataset(strategy="bfd")`` (the installed package) with
  ``map_kwargs={"batch_size": buffer}``: best-fit-decreasing on each window of ``buffer`` rows;
* ``NeMo knap``: NeMo Automodel's ``greedy_knapsack`` (``neat_packing.py``: decreasing length,
  each sample into the least-filled bin that fits, else a new bin), re-implemented here (NeMo
  Automodel is not installable in the benchmark environment), applied to each window of
  ``buffer`` samples;
* ``bound``: the global bound, ``tokens / (ceil(tokens / pack) * pack)``.

Then the time per buffer of the default algorithm's select call (``pack_lengths`` on each
window, what ``select_samples_to_pack`` runs) against the fastest peer's (NeMo's knapsack on the
same window), on the windows where both give the same pack count (:func:`per_buffer`); and the
stock and carry-over fill of every registered algorithm at every row.

Corpora (both shuffled with seed 0; documents longer than the pack are truncated to it, the
spec's default and what grain requires):

* ``manpages``: ``--lengths PATH`` (22,135 real token counts, median 715);
* ``short``: 200,000 synthetic short documents (chat turns, captions), lengths
  ``max(1, round(exp(N(ln 26, 1.0))))`` (seed 0): log-normal with median 26, mean 42.9, p90 94,
  p99 268 tokens (``--carry-only`` prints these).

Times are wall-clock seconds for the whole pass in this process, but the work differs: energon-pack
plans lengths only (the loader then copies tokens), grain copies token arrays into its rows, TRL
runs ``datasets.map`` over Arrow columns; see docs/benchmarks/peers.md. Needs the ``bench`` extra::

    pip install -e '.[bench]'
    python tests/benchmarks/peers.py [--corpora short,manpages] [--limit N] [--no-algorithms]
        [--per-buffer-only | --algorithms-only | --carry-only]

``--carry-only`` prints each corpus's size (documents, tokens, median, mean, p90 and p99 length;
tokens and global-bound packs per pack size after truncation), then just the carry-over fill
(largest age in brackets) and the global bound per corpus and row, ``simulate`` alone (no grain
or TRL needed; cheap, so run it on the whole corpora: no ``--limit``).
"""

from __future__ import annotations

import argparse
import heapq
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np
from _lengths import DEFAULT_LENGTHS

from energon_pack.algorithms import ALGORITHMS, CarryOver, PackingSpec, pack_lengths, simulate

PACKS = (4096, 8192)
BUFFERS = (16, 64, 256, 2048)


def short_lengths(n: int = 200_000, seed: int = 0) -> np.ndarray:
    """Log-normal short documents: median 26 tokens, mean ~43 (see the module docstring)."""
    rng = np.random.default_rng(seed)
    return np.maximum(1, np.rint(np.exp(rng.normal(np.log(26), 1.0, n)))).astype(np.int64)


def corpus(name: str, limit: int, path: Path) -> np.ndarray | None:
    if name == "short":
        raw = short_lengths()
    elif path.exists():
        raw = np.loadtxt(path, dtype=np.int64)
        raw = raw[np.random.default_rng(0).permutation(raw.size)]
    else:
        return None
    return raw[:limit] if limit else raw


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def grain_packs(lengths: np.ndarray, pack: int, buffer: int, best: bool) -> int:
    """Packs from grain's streaming first-fit / best-fit packer with ``buffer`` open bins."""
    import grain
    from grain.experimental import BestFitPackIterDataset, FirstFitPackIterDataset

    cls = BestFitPackIterDataset if best else FirstFitPackIterDataset
    items = [{"tokens": np.ones(int(n), np.int32)} for n in lengths]
    ds = grain.MapDataset.source(items).to_iter_dataset()
    packed = cls(ds, length_struct={"tokens": pack}, num_packing_bins=buffer, shuffle_bins=False)
    packs = tokens = 0
    for row in packed:
        packs += 1
        tokens += int(np.count_nonzero(row["tokens_segment_ids"]))
    assert tokens == int(lengths.sum()), (tokens, int(lengths.sum()))
    return packs


def trl_packs(lengths: np.ndarray, pack: int, buffer: int) -> int:
    """Packs from TRL's ``pack_dataset(strategy="bfd")`` on windows of ``buffer`` rows."""
    from datasets import Dataset, disable_progress_bars
    from trl.data_utils import pack_dataset

    disable_progress_bars()
    ds = Dataset.from_dict({"input_ids": [[1] * int(n) for n in lengths]})
    out = pack_dataset(ds, pack, strategy="bfd", map_kwargs={"batch_size": buffer})
    assert sum(sum(s) for s in out["seq_lengths"]) == int(lengths.sum())
    return len(out)


def nemo_greedy_knapsack(lengths: list[int], max_length: int) -> list[list[int]]:
    """NeMo Automodel's ``greedy_knapsack`` (``components/datasets/llm/neat_packing.py``),
    re-implemented: indices by decreasing length; each into the least-filled bin (a min-heap of
    ``(fill, bin)``) when it fits there, else into a new bin."""
    heap: list[tuple[int, int]] = []
    bins: list[list[int]] = []
    for idx in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[idx]
        if heap and heap[0][0] + n <= max_length:
            fill, b = heapq.heappop(heap)
            bins[b].append(idx)
            heapq.heappush(heap, (fill + n, b))
        else:
            bins.append([idx])
            heapq.heappush(heap, (n, len(bins) - 1))
    return bins


def nemo_packs(lengths: np.ndarray, pack: int, buffer: int) -> int:
    values = lengths.tolist()
    return sum(
        len(nemo_greedy_knapsack(values[i : i + buffer], pack))
        for i in range(0, len(values), buffer)
    )


def peer_row(lengths: np.ndarray, pack: int, buffer: int) -> dict[str, tuple[float, float]]:
    """``name -> (fill %, seconds)`` for every packer at one row."""
    tokens = int(lengths.sum())
    out: dict[str, tuple[float, float]] = {}

    def put(name: str, packs: int, seconds: float) -> None:
        out[name] = (100 * tokens / (packs * pack), seconds)

    stock, t = timed(simulate, lengths, pack, buffer)
    put("stock", stock.packs, t)
    carry, t = timed(lambda: simulate(lengths, pack, buffer, carry_over=CarryOver()))
    put("carry", carry.packs, t)
    out["carry wait"] = (carry.max_wait_samples, carry.max_age)
    for name, fn, args in (
        ("grain FF", grain_packs, (False,)),
        ("grain BF", grain_packs, (True,)),
        ("TRL bfd", trl_packs, ()),
        ("NeMo knap", nemo_packs, ()),
    ):
        packs, t = timed(fn, lengths, pack, buffer, *args)
        put(name, packs, t)
    put("bound", math.ceil(tokens / pack), 0.0)
    return out


PEERS = ("stock", "carry", "grain FF", "grain BF", "TRL bfd", "NeMo knap")
REPEATS = 5


def best_time(fn, *args) -> tuple[object, float]:
    """``fn(*args)`` and its smallest wall-clock time over :data:`REPEATS` calls."""
    best = math.inf
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return out, best


def per_buffer(lengths: np.ndarray, pack: int, buffer: int) -> tuple[float, float, int, int]:
    """The default algorithm's select call vs NeMo's knapsack, buffer by buffer.

    Each window of ``buffer`` lengths (a Python list, as ``select_samples_to_pack`` passes it)
    is packed by ``pack_lengths(window, PackingSpec(pack_size=pack))`` and by
    :func:`nemo_greedy_knapsack`, each timed as the minimum of :data:`REPEATS` calls. NeMo's
    knapsack is the fastest peer per buffer (grain and TRL take 100x longer per pass). Returns
    the default's and NeMo's mean microseconds per buffer over the windows where both give the
    same pack count, that window count, and the number of windows.
    """
    spec = PackingSpec(pack_size=pack)
    values = lengths.tolist()
    ours = theirs = 0.0
    same = windows = 0
    for i in range(0, len(values), buffer):
        window = values[i : i + buffer]
        bins, t_ours = best_time(pack_lengths, window, spec)
        knap, t_theirs = best_time(nemo_greedy_knapsack, window, pack)
        windows += 1
        if len(bins) == len(knap):
            same += 1
            ours += t_ours
            theirs += t_theirs
    scale = 1e6 / max(same, 1)
    return ours * scale, theirs * scale, same, windows


def print_per_buffer(name: str, lengths: np.ndarray) -> None:
    print(f"\nTime per buffer ({name}), default algorithm vs NeMo knap (min of {REPEATS}):\n")
    print(
        "| pack | buffer | same packs | default us | NeMo us | default / fastest peer, same packs |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for pack in PACKS:
        cut = np.minimum(lengths, pack)
        for buffer in BUFFERS:
            ours, theirs, same, windows = per_buffer(cut, pack, buffer)
            ratio = f"{ours / theirs:.2f}" if same else "-"
            print(
                f"| {pack} | {buffer} | {same}/{windows} | {ours:.1f} | {theirs:.1f} | {ratio} |",
                flush=True,
            )


def print_peers(name: str, lengths: np.ndarray) -> None:
    med = int(np.median(lengths))
    print(f"\n### {name}: {lengths.size} documents, median {med} tokens\n")
    print("| pack | buffer | " + " | ".join(PEERS) + " | bound | carry - grain BF | wait |")
    print("|---:|---:|" + "---:|" * (len(PEERS) + 3))
    times = []
    for pack in PACKS:
        cut = np.minimum(lengths, pack)
        for buffer in BUFFERS:
            row = peer_row(cut, pack, buffer)
            fills = " | ".join(f"{row[p][0]:.2f}" for p in PEERS)
            gap = row["carry"][0] - row["grain BF"][0]
            wait, age = row["carry wait"]
            print(
                f"| {pack} | {buffer} | {fills} | {row['bound'][0]:.2f} | {gap:+.2f} "
                f"| {int(wait)} samples, age {int(age)} |",
                flush=True,
            )
            times.append((pack, buffer, row))
    print(f"\nSeconds per pass ({name}):\n")
    print("| pack | buffer | " + " | ".join(PEERS) + " |")
    print("|---:|---:|" + "---:|" * len(PEERS))
    for pack, buffer, row in times:
        print(f"| {pack} | {buffer} | " + " | ".join(f"{row[p][1]:.2f}" for p in PEERS) + " |")


def print_algorithms(name: str, lengths: np.ndarray) -> None:
    """Every registered algorithm at every row: fill and select seconds, stock and carry-over.

    One row per (pack, buffer, algorithm); seconds are ``SimulationResult.select_seconds`` (the
    select calls only, wall clock).
    """
    names = sorted(ALGORITHMS)
    print(f"\nEvery algorithm ({name}): fill % and select seconds, stock and with carry-over:\n")
    print("| pack | buffer | algorithm | stock fill | stock s | carry fill | carry s |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for pack in PACKS:
        cut = np.minimum(lengths, pack)
        for buffer in BUFFERS:
            for algorithm in names:
                stock = simulate(cut, pack, buffer, algorithm=algorithm)
                carry = simulate(cut, pack, buffer, algorithm=algorithm, carry_over=CarryOver())
                print(
                    f"| {pack} | {buffer} | {algorithm} | {100 * stock.fill:.2f} | "
                    f"{stock.select_seconds:.2f} | {100 * carry.fill:.2f} | "
                    f"{carry.select_seconds:.2f} |",
                    flush=True,
                )


def print_carry(corpora: dict[str, np.ndarray]) -> None:
    """Each corpus's size and length statistics (mean, p90, p99 too), then the carry-over
    (``CarryOver()`` defaults) fill, largest age in brackets, and the global bound: one row per
    (pack, buffer), two columns per corpus."""
    for name, lengths in corpora.items():
        p90, p99 = np.percentile(lengths, [90, 99])
        print(
            f"{name}: {lengths.size} documents, {int(lengths.sum())} tokens (before truncation); "
            f"length median {int(np.median(lengths))}, mean {lengths.mean():.1f}, "
            f"p90 {p90:.0f}, p99 {p99:.0f}"
        )
        for pack in PACKS:
            tokens = int(np.minimum(lengths, pack).sum())
            print(
                f"  pack {pack}: {tokens} tokens after truncation, "
                f"global bound {math.ceil(tokens / pack)} packs"
            )
    print("\nCarry-over fill % (largest age) and global bound:\n")
    heads = "".join(f" {n}: carry | {n}: bound |" for n in corpora)
    print("| pack | buffer |" + heads)
    print("|---:|---:|" + "---:|" * (2 * len(corpora)))
    for pack in PACKS:
        cuts = {n: np.minimum(x, pack) for n, x in corpora.items()}
        for buffer in BUFFERS:
            cells = []
            for cut in cuts.values():
                carry = simulate(cut, pack, buffer, carry_over=CarryOver())
                bound = 100 * int(cut.sum()) / (math.ceil(int(cut.sum()) / pack) * pack)
                cells.append(f" {100 * carry.fill:.2f} ({carry.max_age}) | {bound:.2f} |")
            print(f"| {pack} | {buffer} |" + "".join(cells), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default="short,manpages")
    parser.add_argument(
        "--lengths", type=Path, default=DEFAULT_LENGTHS, help="manpages lengths file, one per line"
    )
    parser.add_argument("--limit", type=int, default=0, help="use only the first N documents")
    parser.add_argument("--no-algorithms", action="store_true", help="skip the per-algorithm table")
    parser.add_argument(
        "--per-buffer-only", action="store_true", help="only the time-per-buffer table"
    )
    parser.add_argument(
        "--algorithms-only", action="store_true", help="only the per-algorithm fill/time table"
    )
    parser.add_argument(
        "--carry-only",
        action="store_true",
        help="only the carry-over fill and global bound table (simulate alone)",
    )
    args = parser.parse_args()
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        import grain  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        if not (args.per_buffer_only or args.algorithms_only or args.carry_only):  # need neither
            print(f"{exc}: install the benchmark extra, pip install -e '.[bench]'")
            return 0
    print(f"{CarryOver()}")
    if args.carry_only:
        found = {n: corpus(n, args.limit, args.lengths) for n in args.corpora.split(",")}
        for name in [n for n, x in found.items() if x is None]:
            print(f"{args.lengths} not found (pass --lengths PATH): skipping {name}.")
        print_carry({n: x for n, x in found.items() if x is not None})
        return 0
    for name in args.corpora.split(","):
        lengths = corpus(name, args.limit, args.lengths)
        if lengths is None:
            print(f"{args.lengths} not found (pass --lengths PATH): skipping {name}.")
            continue
        if args.algorithms_only:
            print_algorithms(name, lengths)
            continue
        if not args.per_buffer_only:
            print_peers(name, lengths)
        print_per_buffer(name, lengths)
        if not args.no_algorithms and not args.per_buffer_only:
            print_algorithms(name, lengths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
