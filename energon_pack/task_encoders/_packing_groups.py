# SPDX-License-Identifier: Apache-2.0
"""Packing policy per dataset of a blend (energon PR #228's groups, on energon 7.4.1).

A metadataset names each leaf's group in its subflavors (on the leaf, or once on a nested
metadataset for all its leaves); the encoder maps group names to :class:`PackingPolicy`::

    blend:                                     encoder.packing_groups = {
      - weight: 1                                  "video": PackingPolicy(
        path: ./video                                  buffer_size=8, max_media_tokens_per_pack=8192),
        subflavors: {packing_group: video}         "text": PackingPolicy(
      - weight: 1                                      buffer_size=256, algorithm="next_fit"),
        path: ./chat                           }
        subflavors: {packing_group: text}

Each group is packed in its own buffer with its policy (the encoder's config for every field
the policy leaves None; leaves without a group form the default group, with the loader's
``packing_buffer_size``), and the groups' packs are blended by the metadataset's weights (a
group weighs the sum of its leaves'): in tokens with ``blend_size="tokens"``, in documents
with ``blend_size=None``. Every buffer, carry and blend position is part of the loader's one
saved state; the fingerprint names a changed policy (``packing_groups.video.buffer_size: 8 ->
16``). How-to: docs/howto/blends.md.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from energon_pack.algorithms import PackingSpec
from energon_pack.algorithms._registry import check_algorithm
from energon_pack.energon import (
    GROUP_SUBFLAVOR,
    PackingGroupError,
    build_grouped_train_datasets,
    group_of,
    leaf_groups,
)
from energon_pack.task_encoders._blend_size import BlendSize, blend_description

__all__ = ["PackingPolicy", "grouped_train_datasets", "policy_fingerprint"]


@dataclass(frozen=True, kw_only=True)
class PackingPolicy:
    """How one packing group of a blend is packed; None: the encoder's (or the loader's).

    ``PackingPolicy(buffer_size=8, max_media_tokens_per_pack=8192)`` for video beside
    ``PackingPolicy(buffer_size=256)`` for text. ``pack_size``, ``alignment``, the over-long
    policy and carry-over stay the encoder's: one batch holds packs of every group.
    """

    #: Samples in this group's packing buffer, per worker (None: the loader's
    #: ``packing_buffer_size``).
    buffer_size: int | None = None
    #: Packing algorithm, a key of energon_pack.algorithms.ALGORITHMS.
    algorithm: str | None = None
    #: At most this many documents in one pack.
    max_samples_per_pack: int | None = None
    #: At most this many media placeholder tokens in one pack.
    max_media_tokens_per_pack: int | None = None
    #: At most this many images plus videos in one pack.
    max_media_per_pack: int | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "algorithm" or value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"PackingPolicy {field.name}={value!r} must be an int >= 1.")
        if self.algorithm is not None:
            check_algorithm(self.algorithm)

    def spec(self, config: PackingSpec) -> Any:
        """``config`` with this policy's fields that are set."""
        changes = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "buffer_size" and getattr(self, f.name) is not None
        }
        return dataclasses.replace(config, **changes)


def policy_fingerprint(policies: Mapping[str, PackingPolicy] | None) -> dict[str, str]:
    """Fingerprint entries of the policies: ``{"packing_groups.video.buffer_size": "8", ...}``."""
    out: dict[str, str] = {}
    for name, policy in sorted((policies or {}).items()):
        for field in dataclasses.fields(PackingPolicy):
            out[f"packing_groups.{name}.{field.name}"] = repr(getattr(policy, field.name))
    return out


class BranchSelect:
    """A group's ``select_samples_to_pack``: every document must carry the group's name (its
    raw sample's subflavors, kept by ``EncodedSample.derive_from``), else it would be packed
    under another policy than its leaf's."""

    def __init__(self, encoder: Any, group: str | None) -> None:
        self.encoder = encoder
        self.group = group

    def __call__(self, samples: list[Any]) -> list[list[Any]]:
        for sample in samples:
            if group_of(sample) != self.group:
                raise PackingGroupError(
                    f"document {sample.__key__!r} of packing group {self.group!r} carries "
                    f"packing_group {group_of(sample)!r} in its __subflavors__: build documents "
                    "with EncodedSample.derive_from(raw_sample, ...) so that they keep the raw "
                    "sample's subflavors."
                )
        return self.encoder.select_samples_to_pack(samples)


def pack_tokens(pack: Any) -> int:
    """A pack's real tokens: its size in the blend of groups under ``blend_size="tokens"``."""
    return int(sum(pack.doc_lengths))


def pack_documents(pack: Any) -> int:
    """A pack's documents: its size in the blend of groups under ``blend_size=None``."""
    return len(pack.doc_lengths)


def grouped_train_datasets(encoder: Any, *, worker_config: Any, **kwargs: Any) -> Any:
    """energon's train dataset with one packing pipeline per group (module docstring)."""
    policies: Mapping[str, PackingPolicy] = encoder.packing_groups
    datasets = kwargs.get("datasets") or ()
    names = leaf_groups(datasets)
    unknown = sorted({n for n in names if n is not None and n not in policies})
    if unknown:
        raise ValueError(
            f"the metadataset names packing_group {unknown} in its subflavors, but "
            f"encoder.packing_groups has {sorted(policies)}: add a PackingPolicy for each."
        )
    unused = sorted(set(policies) - set(names))
    if unused:
        warnings.warn(
            f"encoder.packing_groups {unused} name no dataset of this metadataset (none has "
            f"that {GROUP_SUBFLAVOR!r} in its subflavors): their policies are not used.",
            stacklevel=2,
        )
    blend = blend_description(encoder)
    if blend is not None and blend != BlendSize.TOKENS.value:
        raise ValueError(
            f"encoder.packing_groups blends the groups' packs in tokens (blend_size='tokens') "
            f"or documents (blend_size=None); a pack cannot be measured in {blend}: set "
            "blend_size to 'tokens' or None."
        )
    default_buffer = kwargs.pop("packing_buffer_size", None)  # each group's own below
    if encoder._is_overridden(encoder.postencode_sample):
        raise ValueError(
            f"{type(encoder).__name__} overrides postencode_sample, which packing groups do not "
            "support (energon would run it on the packs): do that work in pack_selected_samples."
        )
    branches, leaves = [], {}
    buffers: dict[str | None, int] = {}
    for name in dict.fromkeys(names):
        policy = policies.get(name) if name is not None else None
        size = policy.buffer_size if policy and policy.buffer_size else default_buffer
        if size is None:
            raise ValueError(
                f"packing group {name!r} has no buffer size: pass packing_buffer_size=... to "
                "get_train_dataset or set its PackingPolicy(buffer_size=...)."
            )
        leaves[name] = [i for i, n in enumerate(names) if n == name]
        buffers[name] = size
        pack = functools.partial(
            encoder._packing_dataset,
            packing_buffer_size=size,
            worker_config=worker_config,
            spec=encoder.spec_for_group(name),
            pre_packer=BranchSelect(encoder, name),
        )
        branches.append((leaves[name], pack))
    encoder._group_leaves = leaves
    encoder._group_buffers = buffers
    return build_grouped_train_datasets(
        encoder,
        worker_config=worker_config,
        branches=branches,
        sample_size=encoder.blend_sample_size if blend is not None else None,
        pack_size=pack_tokens if blend is not None else pack_documents,
        **kwargs,
    )
