# SPDX-License-Identifier: Apache-2.0
"""Benchmark: real tokens per second out of an energon loader, packed vs padded.

Same dataset, same tokenizer, same ``encode_sample`` (``LLMPackingTaskEncoder``); the only
difference is what happens after encoding:

* ``padded``: no packing buffer; ``batch`` pads each document to its own row of ``pack_size``
  (tokens, labels, position ids): what a loader without packing delivers.
* ``packed``: ``packing_buffer_size`` samples are selected with each algorithm, packed
  (``pack_documents``) and collated (``collate_packs``, rows padded to ``pack_size``).

Reported per configuration: wall time of one epoch (``repeat=False``, ``num_workers=0``, best
of ``--repeats``), real tokens per second, fill (real tokens / delivered slots) and the time
spent in the packing stages (``select_samples_to_pack`` + ``pack_selected_samples`` +
``batch``) relative to the rest of the loader. The bar: the packing stages add <= 10% per real
token. Run::

    python tests/benchmarks/loader.py [--docs 1500] [--pack-size 2048] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from megatron.energon import stateless  # noqa: E402

from energon_pack.algorithms import ALGORITHMS  # noqa: E402
from energon_pack.samples import EncodedSample  # noqa: E402
from energon_pack.task_encoders import LLMPackingTaskEncoder  # noqa: E402
from energon_pack.training import make_loader  # noqa: E402
from energon_pack_tools import WORDS, make_text_dataset, make_tokenizer, synthetic_texts


class Timed:
    """Accumulates the time spent in the packing stages (same process: num_workers=0)."""

    stage_seconds: float = 0.0

    def _timed(self, fn: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.stage_seconds += time.perf_counter() - start


class TimedPacking(Timed, LLMPackingTaskEncoder):
    def select_samples_to_pack(self, samples: list[EncodedSample]) -> Any:
        return self._timed(super().select_samples_to_pack, samples)

    @stateless
    def pack_selected_samples(self, samples: list[EncodedSample]) -> Any:
        return self._timed(super().pack_selected_samples, samples)

    @stateless
    def batch(self, samples: list[Any]) -> Any:
        return self._timed(super().batch, samples)


class Padded(Timed, LLMPackingTaskEncoder):
    """No packing: one document per row, padded to ``pack_size``."""

    @stateless
    def batch(self, samples: list[EncodedSample]) -> Any:
        return self._timed(self._pad, samples)

    def _pad(self, samples: list[EncodedSample]) -> dict[str, torch.Tensor]:
        n, length = len(samples), self.config.pack_size
        tokens = torch.full((n, length), self.config.pad_token_id, dtype=torch.int64)
        labels = torch.full((n, length), -100, dtype=torch.int64)
        for row, s in enumerate(samples):
            k = len(s.tokens)
            tokens[row, :k] = s.tokens
            labels[row, : k - 1] = torch.where(s.loss_mask[1:], s.tokens[1:], -100)
        positions = torch.arange(length).expand(n, length)
        return {"tokens": tokens, "labels": labels, "position_ids": positions}


def run(path: Path, encoder: Timed, **loader: Any) -> tuple[float, int, int, float]:
    """One epoch: (seconds, real tokens, delivered slots, seconds in packing stages)."""
    encoder.stage_seconds = 0.0
    start = time.perf_counter()
    real = slots = 0
    for batch in make_loader(path, encoder, **loader):
        tokens = batch["tokens"] if isinstance(batch, dict) else batch.tokens
        real += int((batch["labels"] if isinstance(batch, dict) else batch.labels).ne(-100).sum())
        slots += tokens.numel()
    return time.perf_counter() - start, real, slots, encoder.stage_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--pack-size", type=int, default=2048)
    parser.add_argument("--buffer", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        # Mid-length documents: 20..1500 words (~1..1500 tokens + BOS/EOD) at pack size 2048.
        texts = synthetic_texts(args.docs, seed=0, min_words=20, max_words=1500)
        tok = make_tokenizer(Path(tmp) / "tok", [" ".join(WORDS)])
        path = make_text_dataset(Path(tmp) / "ds", texts, samples_per_shard=500)
        common = {"pack_size": args.pack_size, "overlong": "truncate", "log_every": 0}

        configs: list[tuple[str, Timed, dict[str, Any]]] = [
            (
                "padded (no packing), batch 8",
                Padded(tok, **common),
                {"packing_buffer_size": None, "batch_size": 8},
            ),
        ]
        for name in sorted(ALGORITHMS):
            configs.append(
                (
                    f"packed {name}, batch 2",
                    TimedPacking(tok, algorithm=name, **common),
                    {"packing_buffer_size": args.buffer, "batch_size": 2},
                )
            )

        run(path, configs[0][1], **configs[0][2])  # warm-up: page cache, tokenizer
        # Round robin over the configurations, so background load hits them alike.
        results: list[list[tuple[float, int, int, float]]] = [[] for _ in configs]
        for _ in range(args.repeats):
            for i, (_, encoder, loader) in enumerate(configs):
                results[i].append(run(path, encoder, **loader))
        rows = [(label, *min(r, key=lambda x: x[0])) for (label, _, _), r in zip(configs, results)]

    base_seconds, base_real = rows[0][1], rows[0][2]
    base_per_token = base_seconds / base_real
    print(
        f"\n{args.docs} docs, pack size {args.pack_size}, packing buffer {args.buffer}, "
        f"num_workers=0, best of {args.repeats}, torch threads 1\n"
    )
    header = (
        f"{'configuration':<42} {'epoch s':>8} {'real tok/s':>11} {'fill':>6} "
        f"{'stages s':>9} {'stages/rest':>11} {'s/real tok vs padded':>21}"
    )
    print(header)
    print("-" * len(header))
    for label, seconds, real, slots, stage in rows:
        rest = seconds - stage
        print(
            f"{label:<42} {seconds:8.2f} {real / seconds:11.0f} {real / slots:6.1%} "
            f"{stage:9.3f} {stage / rest:11.1%} {seconds / real / base_per_token - 1:+21.1%}"
        )
    worst = max(stage / (seconds - stage) for _, seconds, _, _, stage in rows[1:])
    verdict = "PASS" if worst <= 0.10 else "FAIL"
    print(f"\nbar: packing stages add <= 10% per real token -> worst {worst:.1%} ({verdict})")


if __name__ == "__main__":
    main()
