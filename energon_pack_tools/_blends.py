# SPDX-License-Identifier: Apache-2.0
"""Blended metadatasets for tests, the benchmark and the how-to: a ``blend:`` YAML over energon
datasets, a short-document + long-document pair of ``LengthTextEncoder`` datasets, and the
token and document shares per dataset that a loader's packs trained on.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from energon_pack_tools._datasets import make_text_dataset

__all__ = ["BlendShares", "make_blend_metadataset", "make_short_long_blend", "trained_shares"]

#: Documents of the short dataset are at most this long, those of the long one longer.
SHORT_MAX = 64


def make_blend_metadataset(
    path: Path,
    weighted: Sequence[tuple[Path, float]],
    groups: Sequence[str | None] | None = None,
) -> Path:
    """A MetadatasetV2 YAML at ``path`` whose train split is ``blend:`` of ``(dataset, weight)``;
    ``groups``: each dataset's ``packing_group`` subflavor (None: none)."""
    lines = ["__module__: megatron.energon", "__class__: MetadatasetV2", "splits:", "  train:"]
    lines.append("    blend:")
    for i, (dataset, weight) in enumerate(weighted):
        lines += [f"      - weight: {weight}", f"        path: {Path(dataset).resolve()}"]
        if groups is not None and groups[i] is not None:
            lines.append(f"        subflavors: {{packing_group: {groups[i]}}}")
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path


def make_short_long_blend(
    root: Path,
    *,
    short: int = 400,
    long: int = 100,
    weights: tuple[float, float] = (1.0, 1.0),
    groups: tuple[str | None, str | None] | None = None,
) -> Path:
    """Two ``LengthTextEncoder`` datasets under ``root`` (``short`` documents of 4..64 tokens,
    ``long`` of 300..1500) and ``root/blend.yaml`` blending them with ``weights`` (and
    ``groups``, their ``packing_group`` subflavors)."""
    rng = random.Random(5)
    root = Path(root)
    paths = [
        make_text_dataset(root / "short", [str(rng.randint(4, SHORT_MAX)) for _ in range(short)]),
        make_text_dataset(root / "long", [str(rng.randint(300, 1500)) for _ in range(long)]),
    ]
    return make_blend_metadataset(root / "blend.yaml", list(zip(paths, weights)), groups)


@dataclass(frozen=True)
class BlendShares:
    """Tokens and documents the packs held per dataset (``short``, ``long``)."""

    #: Real tokens per dataset.
    tokens: tuple[int, int]
    #: Documents per dataset.
    documents: tuple[int, int]

    def token_share(self, i: int) -> float:
        """Dataset ``i``'s share of the tokens (0..1)."""
        return self.tokens[i] / sum(self.tokens)

    def document_share(self, i: int) -> float:
        """Dataset ``i``'s share of the documents (0..1)."""
        return self.documents[i] / sum(self.documents)


def trained_shares(packs: Iterable[Any]) -> BlendShares:
    """Shares of :func:`make_short_long_blend`'s datasets in ``packs`` (or batches): a document
    of at most :data:`SHORT_MAX` tokens is from ``short`` (the ranges do not overlap)."""
    tokens, docs = [0, 0], [0, 0]
    for item in packs:
        rows = item.doc_lengths if isinstance(item.doc_lengths[0], list) else [item.doc_lengths]
        for length in (int(n) for row in rows for n in row):
            i = 0 if length <= SHORT_MAX else 1
            tokens[i] += length
            docs[i] += 1
    return BlendShares(tokens=(tokens[0], tokens[1]), documents=(docs[0], docs[1]))
