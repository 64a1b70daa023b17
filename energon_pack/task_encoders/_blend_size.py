# SPDX-License-Identifier: Apache-2.0
"""What a packing task encoder measures for a size-weighted blend (docs/howto/blends.md).

``encoder.blend_size`` turns it on for a metadataset's ``blend:`` weights:

- ``"tokens"``: the tokens ``encode_sample`` makes of the raw sample (every document, after the
  over-long policy): exact, at the cost of encoding each sample twice;
- ``"bytes"``: the UTF-8 bytes of the raw sample's ``text`` (or ``caption``) field: free, in
  tokens only as exact as the datasets' bytes per token are equal;
- a callable ``raw_sample -> int`` (a length field, media tokens from energon's metadata, ...).

A subclass that overrides ``blend_sample_size`` (energon PR #238's hook name) turns it on too.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from megatron.energon.metadataset.loader_interface import DatasetBlendMode

from energon_pack.energon import blend_index, group_of, rebuilding, size_blending

__all__ = ["BlendSize", "blend_description", "blending", "dataset_counts", "raw_sample_size"]


class BlendSize(enum.Enum):
    """The built-in sizes of ``encoder.blend_size``."""

    #: Tokens ``encode_sample`` makes of the sample (exact; encodes it twice).
    TOKENS = "tokens"
    #: UTF-8 bytes of the sample's ``text`` (or ``caption``) field.
    BYTES = "bytes"


def blend_description(encoder: Any) -> str | None:
    """The size the blend weighs, for the resume fingerprint; None when the blend weighs
    samples (energon's own, nothing added to the fingerprint)."""
    hook = type(encoder).blend_sample_size
    overridden = hook.__qualname__ != "PackingTaskEncoder.blend_sample_size"
    size = getattr(encoder, "blend_size", None)
    if overridden:
        return f"{type(encoder).__qualname__}.blend_sample_size"
    if size is None:
        return None
    if callable(size):
        return f"callable {getattr(size, '__qualname__', type(size).__qualname__)}"
    return BlendSize(size).value


def raw_sample_size(encoder: Any, raw_sample: Any) -> int:
    """The size of ``raw_sample`` under ``encoder.blend_size`` (see the module docstring)."""
    size = encoder.blend_size
    if callable(size):
        return size(raw_sample)
    if BlendSize(size) is BlendSize.TOKENS:
        with rebuilding():  # measured, not encoded: nothing counted
            return sum(len(doc.tokens) for doc in encoder.encode_sample(raw_sample))
    text = getattr(raw_sample, "text", None)
    if text is None:
        text = getattr(raw_sample, "caption", None)
    if text is None and isinstance(raw_sample, dict):
        text = raw_sample.get("text")
    if not isinstance(text, (str, bytes)):
        raise ValueError(
            f"blend_size='bytes' needs a 'text' or 'caption' field; sample "
            f"{getattr(raw_sample, '__key__', '?')!r} is a {type(raw_sample).__name__}: set "
            "encoder.blend_size to 'tokens' or a callable raw_sample -> int."
        )
    return len(text.encode() if isinstance(text, str) else text)


def blending(encoder: Any, kwargs: dict[str, Any]) -> Any:
    """The context for energon's ``build_train_datasets(**kwargs)``: a size-weighted blend
    (:func:`~energon_pack.energon.size_blending`) when the encoder asks for one (a grouped
    build weighs sizes itself)."""
    import contextlib

    if blend_description(encoder) is None or encoder.packing_groups:
        return contextlib.nullcontext()
    mode = kwargs.get("blend_mode", DatasetBlendMode.NONE)
    if len(kwargs.get("datasets") or ()) > 1 and mode != DatasetBlendMode.DATASET_WEIGHT:
        raise ValueError(
            f"{type(encoder).__name__}.blend_size weighs a metadataset's `blend:` weights in "
            f"sizes, but this metadataset blends by {mode.value!r} (blend_epochized fixes each "
            "dataset's repetitions per epoch): write the blend as `blend:` with `weight:` "
            "entries, or set encoder.blend_size = None."
        )
    sample_size: Callable[[Any], int] = encoder.blend_sample_size
    return size_blending(sample_size)


def dataset_counts(
    pack: Any, members: Sequence[Any], leaves: Mapping[str | None, list[int]] | None = None
) -> dict[str, list[Any]]:
    """``record_pack`` arguments that count ``pack`` per blended dataset: each member's place in
    the blend (from its restore key) and its loss tokens (labels other than -100); none when no
    member comes from a blend. With packing groups, ``leaves`` maps each group to its leaves'
    places in the metadataset, and a member's restore key holds its place in its group."""
    datasets = [blend_index(getattr(m, "__restore_key__", None)) for m in members]
    if leaves is not None:
        datasets = [leaves[group_of(m)][d or 0] for m, d in zip(members, datasets)]
    padded = getattr(pack, "doc_lengths_padded", None)
    if all(d is None for d in datasets) or padded is None or len(padded) != len(datasets):
        return {}
    targets = (pack.labels != -100).split(list(padded))
    return {"datasets": datasets, "loss_tokens": [int(t.sum()) for t in targets]}
