# SPDX-License-Identifier: Apache-2.0
"""Save at many points of one ``repeat=False`` epoch, restore in a fresh loader, read to the end.

For each configuration (workers x carry-over x checkpoint cadence) the uninterrupted epoch is
the reference; then for save points 1, 2, n/4, n/2 and each of the last 12 items (n items in
the epoch), the items read before the save plus the restored loader's items must equal it:
member keys, ``__restore_key__`` and summed ``counts``. Printed per configuration: how many
save points differ in keys / restore keys / counts, how many restores crashed, and how many
documents were trained twice in total. 120 documents of 1..80 tokens (some split), pack size
64, batch 2, packing buffer 8, shuffle buffer 8. The figures before and after issue 22 are in
docs/benchmarks/resume.md::

    python tests/benchmarks/resume_save_points.py --workers 0,1,2
"""

from __future__ import annotations

import argparse
import collections
import random
import tempfile
from pathlib import Path
from typing import Any

from energon_pack.algorithms import CarryOver
from energon_pack.samples import PackingCounts
from energon_pack.testing import member_keys
from energon_pack_tools import LengthTextEncoder, make_text_dataset


def make_loader(path: Path, workers: int, carry: bool, every_sample: bool) -> Any:
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    encoder = LengthTextEncoder(
        pack_size=64, overlong="split", carry_over=CarryOver() if carry else None
    )
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=3)
    dataset = get_train_dataset(
        str(path),
        worker_config=worker_config,
        batch_size=2,
        packing_buffer_size=8,
        shuffle_buffer_size=8,
        max_samples_per_sequence=None,
        task_encoder=encoder,
        repeat=False,
    )
    cadence = {"checkpoint_every_sec": 0, "checkpoint_every_min_n_samples": 1}
    return get_savable_loader(dataset, **(cadence if every_sample else {}))


def _close(loader: Any) -> None:
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()


def _summary(items: list[Any]) -> tuple[list[Any], list[Any], PackingCounts]:
    keys = [tuple(member_keys(b)) for b in items]
    return keys, [b.__restore_key__ for b in items], PackingCounts.total(b.counts for b in items)


def check(path: Path, workers: int, carry: bool, every_sample: bool) -> str:
    def make() -> Any:
        return make_loader(path, workers, carry, every_sample)

    loader = make()
    keys, restore_keys, total = _summary(list(loader))
    _close(loader)
    n = len(keys)
    points = sorted({1, 2, n // 4, n // 2, *range(max(3, n - 12), n + 1)})
    differ = collections.Counter()
    twice = 0
    for k in points:
        first = make()
        it = iter(first)
        before = [next(it) for _ in range(k)]
        state = first.save_state_rank()
        _close(first)
        second = make()
        second.restore_state_rank(state)
        try:
            after = list(second)
        except Exception:  # a restore that crashes counts as its own failure
            differ["crashed"] += 1
            continue
        finally:
            _close(second)
        got_keys, got_restore_keys, counts = _summary(before + after)
        differ["keys"] += got_keys != keys
        differ["restore keys"] += got_restore_keys != restore_keys
        differ["counts"] += counts != total
        seen = collections.Counter(key for item in got_keys for key in item)
        twice += sum(c - 1 for c in seen.values() if c > 1)
    return (
        f"workers={workers} carry_over={carry!s:5} checkpoint={'every' if every_sample else 'default'}"
        f" items={n:3} save points={len(points)}: keys differ {differ['keys']:2}, restore keys "
        f"differ {differ['restore keys']:2}, counts differ {differ['counts']:2}, crashed "
        f"{differ['crashed']:2}, documents trained twice {twice}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,1,2")
    args = parser.parse_args()
    rng = random.Random(5)
    texts = [str(rng.choice([rng.randint(1, 40), rng.randint(1, 80)])) for _ in range(120)]
    with tempfile.TemporaryDirectory() as tmp:
        path = make_text_dataset(Path(tmp) / "ds", texts, samples_per_shard=20)
        for workers in map(int, args.workers.split(",")):
            for carry in (False, True):
                for every_sample in (True, False):
                    print(check(path, workers, carry, every_sample), flush=True)


if __name__ == "__main__":
    main()
