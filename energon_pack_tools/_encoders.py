# SPDX-License-Identifier: Apache-2.0
"""Hand-made documents (``make_document("a", [5, 6, 7])``) and :class:`LengthTextEncoder`,
whose sample text ``"n"`` is a document of ``n`` tokens: packing depends on lengths alone, so it
runs the product's whole packing path without a tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from megatron.energon import TextSample

from energon_pack.samples import EncodedSample
from energon_pack.task_encoders import PackingConfig, PackingTaskEncoder

__all__ = ["LengthTextEncoder", "make_document"]


def make_document(
    key: str,
    tokens: Iterable[int] | torch.Tensor,
    loss_mask: Iterable[bool | int] | torch.Tensor | None = None,
    *,
    document_type: type[EncodedSample] = EncodedSample,
    **fields: Any,
) -> EncodedSample:
    """A document with ``__key__=key``, int64 ``tokens`` and a bool ``loss_mask`` (default all
    True); ``__restore_key__`` is ``()`` unless given in ``fields``. Shapes are not checked,
    so a test can build a malformed document on purpose."""
    ids = torch.as_tensor(list(tokens) if not isinstance(tokens, torch.Tensor) else tokens)
    ids = ids.to(torch.int64)
    if loss_mask is None:
        mask = torch.ones(ids.shape[0], dtype=torch.bool)
    elif isinstance(loss_mask, torch.Tensor):
        mask = loss_mask.to(torch.bool)
    else:
        mask = torch.tensor([bool(m) for m in loss_mask], dtype=torch.bool)
    fields.setdefault("__restore_key__", ())
    return document_type(__key__=key, tokens=ids, loss_mask=mask, **fields)


class LengthTextEncoder(PackingTaskEncoder[TextSample]):
    """Sample text ``"n"`` -> a document of ``n`` zero tokens, all prediction targets.

    Args:
        config, **config_fields: As for :class:`~energon_pack.task_encoders.PackingTaskEncoder`.

    Attributes:
        selections: The member keys of every buffer handed to ``select_samples_to_pack`` in this
            process, in order (with ``num_workers=0``: every buffer of the loader).
    """

    def __init__(self, config: PackingConfig | None = None, **config_fields: Any) -> None:
        super().__init__(config, **config_fields)
        self.selections: list[list[str]] = []

    def encode_document(self, sample: TextSample) -> EncodedSample:
        text = sample.text.decode() if isinstance(sample.text, bytes) else sample.text
        try:
            length = int(text)
        except ValueError:
            raise ValueError(
                f"sample {sample.__key__!r} has text {text[:40]!r}; LengthTextEncoder needs the "
                "document's token count as text (write str(n))."
            ) from None
        return EncodedSample.derive_from(
            sample,
            tokens=torch.zeros(length, dtype=torch.int64),
            loss_mask=torch.ones(length, dtype=torch.bool),
        )

    def select_samples_to_pack(self, samples: list[EncodedSample]) -> list[list[EncodedSample]]:
        """Record the buffer's keys, then partition it as the base class does."""
        self.selections.append([s.__key__ for s in samples])
        return super().select_samples_to_pack(samples)
