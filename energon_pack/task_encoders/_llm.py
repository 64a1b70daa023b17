# SPDX-License-Identifier: Apache-2.0
"""``LLMPackingTaskEncoder``: pretraining text (energon ``TextSample``, or JSONL cooked by
:func:`cook_text`) into packs. Each text becomes one document ``[BOS] text [EOD]`` in which
every token but BOS is a target; text that tokenizes to nothing is dropped and counted. See
docs/quickstart.md.
"""

from __future__ import annotations

from typing import Any

from megatron.energon import Cooker, TextSample, basic_sample_keys, stateless

from energon_pack.encoding import DocumentTokenizer, masked_document
from energon_pack.samples import EncodedSample
from energon_pack.task_encoders._base import PackingTaskEncoder

__all__ = ["LLMPackingTaskEncoder", "cook_text"]


@stateless
def cook_text(sample: dict) -> TextSample:
    """Cook a crude JSONL sample ``{"text": ...}`` into a ``TextSample``."""
    record, key = sample.get("json"), sample.get("__key__")
    if not isinstance(record, dict) or "text" not in record:
        got = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise ValueError(
            f"JSONL sample {key!r} has no field 'text' (got {got}); write one JSON object per "
            "line with a 'text' field (prompt/response records: SFTPackingTaskEncoder)."
        )
    if not isinstance(record["text"], str):
        raise ValueError(
            f"JSONL sample {key!r}: 'text' is {type(record['text']).__name__} "
            f"({record['text']!r:.40}), not a string; write it as a JSON string "
            '("text": "42") or leave the line out.'
        )
    return TextSample(**basic_sample_keys(sample), text=record["text"])


class LLMPackingTaskEncoder(PackingTaskEncoder[TextSample]):
    """Packs tokenized text documents.

    Args:
        tokenizer: A transformers tokenizer or a local tokenizer directory.
        add_bos: Start every document with BOS (default: when the tokenizer has one).
        add_eos: End every document with EOD (``eod_token_id``, else the tokenizer's EOS, else
            its SEP; default: when one exists).
        eod_token_id: End-of-document token if not EOS.
        **packing: :class:`~energon_pack.task_encoders.PackingConfig` fields
            (``pack_size`` required; ``pad_token_id`` defaults to the tokenizer's PAD).
    """

    cookers = (Cooker(cook_text),)
    #: Tokenizing draws no random numbers: ``encode_sample`` runs unseeded (a subclass that
    #: overrides ``encode_document``, or a tokenizer not from transformers, is seeded).
    encode_draws_random = False

    def __init__(
        self,
        tokenizer: Any,
        *,
        add_bos: bool | None = None,
        add_eos: bool | None = None,
        eod_token_id: int | None = None,
        **packing: Any,
    ) -> None:
        self.tokenizer = DocumentTokenizer(
            tokenizer, add_bos=add_bos, add_eos=add_eos, eod_token_id=eod_token_id
        )
        packing.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        super().__init__(**packing)

    def _seeds_encode(self) -> bool:
        return super()._seeds_encode() or self.tokenizer.draws_random

    def encode_document(self, sample: TextSample) -> EncodedSample:
        text = sample.text.decode() if isinstance(sample.text, bytes) else sample.text
        body = self.tokenizer.encode_text(text)
        # Text that tokenizes to nothing is an empty document (dropped), not ``BOS EOD``.
        tokens, loss_mask = self.tokenizer.document([], body) if body else masked_document([], [])
        return EncodedSample.derive_from(sample, tokens=tokens, loss_mask=loss_mask)
