# SPDX-License-Identifier: Apache-2.0
"""A packing task encoder whose documents are only lengths, for loader tests and benchmarks.

Packing decisions depend on document lengths alone, so a dataset whose sample ``i`` holds its
token count as text exercises exactly the product's packing path (reading, buffers, selection,
carry-over, state, ``restore_sample``) without a tokenizer. Example: texts ``"6" "5" "3"`` with
``pack_size=10`` become documents of 6, 5 and 3 tokens; ``best_fit_decreasing`` packs them as
``[6, 3]`` and ``[5]``, and ``selections`` holds the one buffer's keys in reading order::

    encoder = LengthTextEncoder(pack_size=10, algorithm="best_fit_decreasing")
    packs = list(make_loader(make_text_dataset(path, ["6", "5", "3"]), encoder))
    [p.doc_lengths for p in packs]  # [[6, 3], [5]]

Everything else (over-long policy, alignment, ``carry_over``) is the real
:class:`~energon_pack.task_encoders.PackingTaskEncoder`, configured by its keyword arguments.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.energon import TextSample

from energon_pack.samples import EncodedSample
from energon_pack.task_encoders import PackingConfig, PackingTaskEncoder

__all__ = ["LengthTextEncoder"]


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
