# SPDX-License-Identifier: Apache-2.0
"""``LLMPackingTaskEncoder``: pretraining text (energon ``TextSample`` or JSONL) into packs.

Each sample's text becomes one document ``[BOS] text [EOD]``; every token but BOS is a
prediction target. With pack size 8, ``"the cat sat"`` -> ``[2, 6, 5, 9, 3]`` (BOS=2, EOD=3)
and ``"a dog"`` -> ``[2, 7, 8, 3]`` do not fit together (5 + 4 > 8), so they land in two packs
unless the buffer holds shorter documents to fill them. Over-long documents follow
``overlong`` (``truncate`` by default; ``split`` keeps every token as consecutive documents).
Text that tokenizes to nothing is dropped and counted in ``stats.dropped_empty`` (an empty
document would teach nothing but ``BOS -> EOD``).

A crude JSONL dataset (``energon prepare data.jsonl``) with a ``text`` field is cooked into
``TextSample`` by :func:`cook_text`, registered in ``cookers``::

    encoder = LLMPackingTaskEncoder("/path/to/tokenizer", pack_size=4096, overlong="split")
    get_train_dataset("data.jsonl", task_encoder=encoder, packing_buffer_size=256, ...)
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

    def encode_document(self, sample: TextSample) -> EncodedSample:
        text = sample.text.decode() if isinstance(sample.text, bytes) else sample.text
        body = self.tokenizer.encode_text(text)
        # Text that tokenizes to nothing is an empty document (dropped), not ``BOS EOD``.
        tokens, loss_mask = self.tokenizer.document([], body) if body else masked_document([], [])
        return EncodedSample.derive_from(sample, tokens=tokens, loss_mask=loss_mask)
