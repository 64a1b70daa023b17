# SPDX-License-Identifier: Apache-2.0
"""The shares a ``blend:`` metadataset would train on, sample-weighted (energon's blend) and
size-weighted (``encoder.blend_size``), measured through the real loader (``analyze`` on a
metadataset), per leaf dataset as energon resolves them (nested metadatasets flattened). Each
run reads packs (``num_workers=0``, ``repeat=True``) until they hold ``tokens`` real tokens and
sums their ``PackingCounts.dataset_*``. A metadataset whose datasets
name a ``packing_group`` subflavor is analyzed under the encoder's ``packing_groups`` (or the
policies given), both runs, with each group's packs and fill. See docs/howto/blends.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from energon_pack.samples import PackingCounts

__all__ = [
    "BlendAnalysis",
    "BlendLeaf",
    "analyze_blend",
    "blend_leaves",
    "blend_groups",
    "parse_packing_group",
    "weighted_blend",
]


@dataclass(frozen=True)
class BlendLeaf:
    """One dataset the loader blends: its path, weight and packing group."""

    #: The leaf dataset's path.
    name: str
    #: Its share of the blend (nested ``blend:`` weights multiplied, summing to 1).
    weight: float
    #: Its ``packing_group`` subflavor (None: the default group).
    group: str | None


def blend_leaves(path: Path | str) -> list[BlendLeaf] | None:
    """The leaves the loader blends for a metadataset whose train split is a ``blend:`` (of two
    or more datasets), or None for anything else. energon resolves them as for
    ``get_train_dataset``: nested metadatasets flattened, their weights multiplied, each leaf's
    subflavors those its references set (an outer one's win), and the loader's own
    ``leaf_groups`` reads its group from them."""
    path = Path(path)
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return None
    from megatron.energon import WorkerConfig, load_dataset
    from megatron.energon.metadataset.loader_interface import DatasetBlendMode

    from energon_pack.energon import leaf_groups

    loaded = load_dataset(path).get_datasets(
        training=True,
        split_part="train",
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
    )
    if loaded.blend_mode != DatasetBlendMode.DATASET_WEIGHT or len(loaded.datasets) < 2:
        return None
    groups = leaf_groups(loaded.datasets)
    return [
        BlendLeaf(str(leaf.dataset.path), float(leaf.weight), group)
        for leaf, group in zip(loaded.datasets, groups)
    ]


def weighted_blend(path: Path | str) -> list[tuple[str, float]] | None:
    """``(path, weight)`` of each leaf of a ``blend:`` metadataset (:func:`blend_leaves`), or
    None for anything else."""
    leaves = blend_leaves(path)
    return None if leaves is None else [(leaf.name, leaf.weight) for leaf in leaves]


def blend_groups(path: Path | str) -> list[str | None] | None:
    """Each leaf's ``packing_group`` subflavor (None: none) as the loader reads it, nested
    metadatasets included (:func:`blend_leaves`), or None when no leaf names one (or ``path``
    is not a ``blend:`` metadataset)."""
    groups = [leaf.group for leaf in blend_leaves(path) or []]
    return groups if any(g is not None for g in groups) else None


def parse_packing_group(text: str) -> tuple[str, Any]:
    """``"NAME=BUFFER[,ALGORITHM]"`` -> ``(NAME, PackingPolicy(buffer_size=BUFFER,
    algorithm=ALGORITHM))``; ``ValueError`` with the expected form otherwise."""
    from energon_pack.task_encoders import PackingPolicy

    name, sep, rest = text.partition("=")
    buffer, _, algorithm = rest.partition(",")
    if not sep or not name.strip() or not buffer.strip().isdigit():
        raise ValueError(
            f"packing group {text!r}: write NAME=BUFFER[,ALGORITHM], e.g. chat=256 or "
            "video=8,best_fit_decreasing."
        )
    policy = PackingPolicy(buffer_size=int(buffer), algorithm=algorithm.strip() or None)
    return name.strip(), policy


#: The two runs of an analysis: sample-weighted, size-weighted.
RUNS = ("samples", "size")


@dataclass(frozen=True)
class GroupRun:
    """One packing group's packs in one run: how many, their documents, real tokens and slots."""

    packs: int = 0
    documents: int = 0
    tokens: int = 0
    slots: int = 0

    def fill(self) -> float:
        """Real tokens / pack slots (0..1)."""
        return self.tokens / self.slots if self.slots else 0.0


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
    #: Each dataset's ``packing_group`` (None: the default group); empty: one buffer.
    groups: list[str | None] = field(default_factory=list)
    #: The policy of each packing group: ``{name: {"buffer_size", "algorithm"}}`` (the
    #: encoder's where the policy leaves them None; the default group: ``"(default)"``).
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Per run (``"samples"``, ``"size"``) and group: its packs, tokens and slots.
    group_runs: dict[str, dict[str, GroupRun]] = field(default_factory=dict)

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

        With packing groups each dataset's group follows its name (``short (chat)``), and one
        line per group gives its policy and, per run, its packs and fill.
        """
        names = [Path(n).name or n for n, _ in self.weighted]
        if self.groups:  # "short (chat)": the dataset and its packing group
            names = [n if g is None else f"{n} ({g})" for n, g in zip(names, self.groups)]
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
        for group, policy in self.policies.items():
            cells = "".join(
                f" | {packs:>5} packs  fill {100 * fill:5.1f}%"
                for packs, fill in (
                    (g.packs, g.fill())
                    for g in (self.group_runs.get(r, {}).get(group, GroupRun()) for r in RUNS)
                )
            )
            out.append(
                f"{'group ' + group:<{width}}  buffer {policy['buffer_size']}, "
                f"{policy['algorithm']}{cells}"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the metadataset, tokens per run, the size and one row per dataset."""
        rows = [{"dataset": n, **row} for (n, _), row in zip(self.weighted, self.shares())]
        for i, row in enumerate(rows):
            row["group"] = self.groups[i] if self.groups else None
        groups = {
            name: {
                **policy,
                **{
                    f"{run}_{what}": getattr(g, what) if what != "fill" else g.fill()
                    for run in RUNS
                    for g in [self.group_runs.get(run, {}).get(name, GroupRun())]
                    for what in ("packs", "documents", "tokens", "slots", "fill")
                },
            }
            for name, policy in self.policies.items()
        }
        return {
            "blend": self.dataset,
            "tokens": self.tokens,
            "size": self.size,
            "rows": rows,
            "packing_groups": groups,
        }


def _run(
    path: Path, encoder: Any, buffer_size: int, tokens: int, progress: bool
) -> tuple[PackingCounts, dict[str, GroupRun]]:
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
    from energon_pack.energon import GROUP_SUBFLAVOR

    counts, read, groups = PackingCounts(), 0, {}
    bar = tqdm(total=tokens, desc="blend", unit="tok", disable=not progress, file=sys.stderr)
    for pack in pin_memory_for_device(get_loader(dataset)):
        n = int(sum(pack.doc_lengths))
        counts, read = counts + pack.counts, read + n
        if encoder.packing_groups:
            name = _group_name((pack.__subflavors__ or {}).get(GROUP_SUBFLAVOR))
            g = groups.get(name, GroupRun())
            groups[name] = GroupRun(
                g.packs + 1, g.documents + len(pack.doc_lengths), g.tokens + n,
                g.slots + encoder.pack_size,
            )  # fmt: skip
        bar.update(n)
        if read >= tokens:
            break
    bar.close()
    return counts, groups


def _group_name(group: Any) -> str:
    return "(default)" if group is None else str(group)


def analyze_blend(
    path: Path | str,
    make_encoder: Callable[[], Any],
    *,
    buffer_size: int,
    tokens: int,
    size: Any = "tokens",
    packing_groups: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> BlendAnalysis:
    """Run the ``blend:`` metadataset at ``path`` twice through fresh encoders from
    ``make_encoder``: sample-weighted, then with ``blend_size = size``, each until its packs
    hold ``tokens`` tokens (see the module docstring). ``packing_groups``: policies
    (``PackingPolicy``) by group name, added to (and replacing those of) the encoder's own
    ``packing_groups``; the groups apply when the encoder then has any."""
    leaves = blend_leaves(path)
    if leaves is None:
        raise ValueError(f"{path} is not a metadataset whose train split is a `blend:`.")
    if tokens < 1:
        raise ValueError(f"tokens={tokens} must be >= 1.")
    runs, policies = [], {}
    for blend_size in (None, size):
        encoder = make_encoder()
        encoder.blend_size = blend_size
        if packing_groups:
            encoder.packing_groups = {**(encoder.packing_groups or {}), **packing_groups}
        runs.append(_run(Path(path), encoder, buffer_size, tokens, progress))
        if encoder.packing_groups:  # each group's buffer and algorithm, as the loader's
            grouped = any(leaf.group is not None for leaf in leaves)
            named = [_group_name(leaf.group) for leaf in leaves] if grouped else []
            for name in dict.fromkeys([*named, *runs[-1][1]]):
                group = None if name == "(default)" else name
                policy = encoder.packing_groups.get(group) if group is not None else None
                policies[name] = {
                    "buffer_size": (policy and policy.buffer_size) or buffer_size,
                    "algorithm": encoder.spec_for_group(group).algorithm,
                }
    return BlendAnalysis(
        dataset=str(path),
        weighted=[(leaf.name, leaf.weight) for leaf in leaves],
        tokens=tokens,
        size=str(getattr(size, "__name__", size)),
        by_samples=runs[0][0],
        by_size=runs[1][0],
        groups=[leaf.group for leaf in leaves] if policies else [],
        policies=policies,
        group_runs={"samples": runs[0][1], "size": runs[1][1]},
    )
