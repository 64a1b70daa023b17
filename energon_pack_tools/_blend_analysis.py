# SPDX-License-Identifier: Apache-2.0
"""The shares a ``blend:`` metadataset would train on, sample-weighted (energon's blend) and
size-weighted (``encoder.blend_size``), measured through the real loader (``analyze`` on a
metadataset). Each run reads packs (``num_workers=0``, ``repeat=True``) until they hold
``tokens`` real tokens and sums their ``PackingCounts.dataset_*``. See docs/howto/blends.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from energon_pack.samples import PackingCounts

__all__ = ["BlendAnalysis", "analyze_blend", "weighted_blend"]


def weighted_blend(path: Path | str) -> list[tuple[str, float]] | None:
    """``(name, weight)`` of each dataset of a metadataset whose train split is a ``blend:``
    (names: the entries' ``path``, else their place), or None for anything else."""
    path = Path(path)
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return None
    import yaml

    spec = yaml.safe_load(path.read_text()) or {}
    train = (spec.get("splits") or {}).get("train") if isinstance(spec, dict) else None
    blend = train.get("blend") if isinstance(train, dict) else None
    if not isinstance(blend, list) or len(blend) < 2:
        return None
    return [
        (str(entry.get("path", i)), float(entry.get("weight", 1.0)))
        for i, entry in enumerate(e if isinstance(e, dict) else {} for e in blend)
    ]


@dataclass(frozen=True, kw_only=True)
class BlendAnalysis:
    """Per dataset of a blend: its weight and the shares both blends trained."""

    #: The metadataset.
    dataset: str
    #: ``(name, weight)`` per dataset, in the blend's order.
    weighted: list[tuple[str, float]]
    #: Real tokens each run read.
    tokens: int
    #: What the size-weighted run weighed (``encoder.blend_size``).
    size: str
    #: Counts of the sample-weighted run (energon's blend).
    by_samples: PackingCounts
    #: Counts of the size-weighted run.
    by_size: PackingCounts

    def shares(self) -> list[dict[str, float]]:
        """Per dataset: ``weight`` (normalized) and the token, document and loss-token shares
        of both runs (``samples_tokens``, ..., ``size_loss_tokens``), each 0..1."""
        total = sum(w for _, w in self.weighted)
        out = []
        for i, (_, weight) in enumerate(self.weighted):
            row = {"weight": weight / total}
            for run, counts in (("samples", self.by_samples), ("size", self.by_size)):
                for name in ("tokens", "documents", "loss_tokens"):
                    values = counts.dataset_shares(f"dataset_{name}")
                    row[f"{run}_{name}"] = values[i] if i < len(values) else 0.0
            out.append(row)
        return out

    def lines(self) -> list[str]:
        """The report: one row per dataset (its path's last part), both blends side by side::

        blend    blend.yaml: 2 datasets, 200000 tokens per run
        dataset  weight | samples: tokens   docs   loss | tokens: tokens   docs   loss
        short     50.0% |            3.9%  52.8%   3.8% |          49.7%  96.5%  49.0%
        """
        names = [Path(n).name or n for n, _ in self.weighted]
        width = max(7, *(len(n) for n in names))
        runs = [("samples", "samples"), (self.size, "size")]
        head = "".join(f" | {r + ':':<8} tokens   docs   loss" for r, _ in runs)
        out = [
            f"{'blend':<{width}}  {self.dataset}: {len(self.weighted)} datasets, {self.tokens} "
            "tokens per run",
            f"{'dataset':<{width}}  weight{head}",
        ]
        for name, row in zip(names, self.shares()):
            cells = "".join(
                " | "
                + " " * 8
                + "".join(
                    f" {100 * row[f'{key}_{n}']:5.1f}%"
                    for n in ("tokens", "documents", "loss_tokens")
                )
                for _, key in runs
            )
            out.append(f"{name:<{width}}  {100 * row['weight']:5.1f}%{cells}")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the metadataset, tokens per run, the size and one row per dataset."""
        rows = [{"dataset": n, **row} for (n, _), row in zip(self.weighted, self.shares())]
        return {"blend": self.dataset, "tokens": self.tokens, "size": self.size, "rows": rows}


def _run(path: Path, encoder: Any, buffer_size: int, tokens: int, progress: bool) -> Any:
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    from tqdm import tqdm

    from energon_pack.training import pin_memory_for_device

    dataset = get_train_dataset(
        str(path),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        packing_buffer_size=buffer_size,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=encoder,
        repeat=True,
    )
    counts, read = PackingCounts(), 0
    bar = tqdm(total=tokens, desc="blend", unit="tok", disable=not progress, file=sys.stderr)
    for pack in pin_memory_for_device(get_loader(dataset)):
        n = int(sum(pack.doc_lengths))
        counts, read = counts + pack.counts, read + n
        bar.update(n)
        if read >= tokens:
            break
    bar.close()
    return counts


def analyze_blend(
    path: Path | str,
    make_encoder: Callable[[], Any],
    *,
    buffer_size: int,
    tokens: int,
    size: Any = "tokens",
    progress: bool = False,
) -> BlendAnalysis:
    """Run the ``blend:`` metadataset at ``path`` twice through fresh encoders from
    ``make_encoder``: sample-weighted, then with ``blend_size = size``, each until its packs
    hold ``tokens`` tokens (see the module docstring)."""
    weighted = weighted_blend(path)
    if weighted is None:
        raise ValueError(f"{path} is not a metadataset whose train split is a `blend:`.")
    if tokens < 1:
        raise ValueError(f"tokens={tokens} must be >= 1.")
    runs = []
    for blend_size in (None, size):
        encoder = make_encoder()
        encoder.blend_size = blend_size
        runs.append(_run(Path(path), encoder, buffer_size, tokens, progress))
    return BlendAnalysis(
        dataset=str(path),
        weighted=weighted,
        tokens=tokens,
        size=str(getattr(size, "__name__", size)),
        by_samples=runs[0],
        by_size=runs[1],
    )
