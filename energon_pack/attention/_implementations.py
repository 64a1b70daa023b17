# SPDX-License-Identifier: Apache-2.0
"""The attention implementations packing serves, one object each.

An :class:`Implementation` knows how a packed row's documents reach its kernel (a bool mask, an
additive mask, a FlexAttention ``BlockMask``, or flash's varlen offsets and no mask), which
transformers class flag says a model runs it, and how to run it on CPU for verification (flash
through a PyTorch reference of the varlen kernel, FlexAttention uncompiled). Everything that
used to compare ``attn_implementation`` strings asks :func:`implementation` instead::

    >>> implementation("eager").mask, implementation("flash_attention_2").varlen
    ('additive', True)
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from energon_pack.attention._flash_reference import FLASH_IMPLEMENTATIONS, emulated_flash
from energon_pack.attention._flex import block_causal_block_mask
from energon_pack.attention._masks import LocalAttention, additive_mask, document_causal_mask

__all__ = ["IMPLEMENTATIONS", "Implementation", "implementation"]

_UNSET = object()


@dataclass(frozen=True)
class Implementation:
    """One ``attn_implementation`` value and what packing does for it."""

    #: transformers' name, e.g. ``"sdpa"``.
    name: str
    #: The mask form: ``"bool"`` (True = may attend), ``"additive"`` (0 / dtype min in the model's
    #: dtype), ``"block_mask"`` (FlexAttention), or None: varlen offsets, no mask (flash).
    mask: str | None
    #: The model-class attribute with which transformers says a model runs it.
    supports_attr: str | None

    @property
    def varlen(self) -> bool:
        """Documents reach the kernel as ``cu_seq_lens`` (one causal-or-not flag per sequence,
        windows applied per document, no chunks, no partial bidirectional blocks)."""
        return self.mask is None

    def supported_by(self, model_class: type) -> bool:
        """Whether transformers lets ``model_class`` run this implementation."""
        return self.supports_attr is None or bool(getattr(model_class, self.supports_attr, False))

    def attention_mask(
        self,
        seq_idx: torch.Tensor,
        local: LocalAttention,
        blocks: torch.Tensor | None = None,
        mask_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor | BlockMask | None:
        """The ``(B, 1, L, L)`` mask of one layer type in this implementation's form (None for
        varlen implementations)."""
        if self.mask == "block_mask":
            return block_causal_block_mask(seq_idx, local=local, blocks=blocks)
        if self.mask is None:
            return None
        mask = document_causal_mask(seq_idx, local, blocks)
        return additive_mask(mask, mask_dtype) if self.mask == "additive" else mask

    @contextlib.contextmanager
    def cpu_route(self, model_class: type | None = None) -> Iterator[None]:
        """Run transformers' route of this implementation on CPU with the same math: flash
        through the reference kernel, FlexAttention uncompiled; sdpa and eager as they are."""
        if self.varlen:
            with emulated_flash(self.name, model_class):
                yield
        elif self.mask == "block_mask":
            with _uncompiled_flex():
                yield
        else:
            yield


IMPLEMENTATIONS: dict[str, Implementation] = {
    impl.name: impl
    for impl in (
        Implementation("sdpa", "bool", "_supports_sdpa"),
        Implementation("eager", "additive", None),
        Implementation("flex_attention", "block_mask", "_supports_flex_attn"),
        *(Implementation(name, None, "_supports_flash_attn") for name in FLASH_IMPLEMENTATIONS),
    )
}


def implementation(name: str) -> Implementation:
    """The :class:`Implementation` called ``name``; ValueError naming the choices."""
    try:
        return IMPLEMENTATIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown attn_implementation {name!r}; choose one of {tuple(IMPLEMENTATIONS)}"
        ) from None


def _no_compile(self: Any, training: bool = False) -> None:
    """``WrappedFlexAttention.__init__`` under :func:`_uncompiled_flex`: nothing compiled."""


@contextlib.contextmanager
def _uncompiled_flex() -> Iterator[None]:
    flex = importlib.import_module("transformers.integrations.flex_attention")
    masking = importlib.import_module("transformers.masking_utils")
    wrapper, build = flex.WrappedFlexAttention, masking.create_block_mask
    # A fresh singleton that never compiles: transformers' __init__ compiles again whenever
    # the call's `training` differs from the instance's (train mode did, through inductor).
    names = ("_instance", "_is_flex_compiled", "_compiled_flex_attention", "__init__")
    saved: dict[str, Any] = {name: wrapper.__dict__.get(name, _UNSET) for name in names}
    values = (None, True, staticmethod(flex_attention), _no_compile)
    for name, value in zip(names, values):
        setattr(wrapper, name, value)
    # transformers would compile its own block masks, once per shape (slow on CPU)
    masking.create_block_mask = lambda *args, **kw: build(*args, **{**kw, "_compile": False})
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
            yield
    finally:
        masking.create_block_mask = build
        for name, value in saved.items():
            if value is _UNSET:
                delattr(wrapper, name)
            else:
                setattr(wrapper, name, value)
