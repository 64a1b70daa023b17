# SPDX-License-Identifier: Apache-2.0
"""``SFTPackingTaskEncoder``: prompt/response pairs (:class:`PromptResponseSample`, or JSONL
cooked by :func:`cook_prompt_response`) into packs, the loss on the response only. With a chat
template the prompt is what ``apply_chat_template(user turn, add_generation_prompt=True)``
renders, a token prefix of the full conversation; without one ``[BOS] prompt response [EOD]``.
See docs/howto/sft.md.
"""

from __future__ import annotations

from typing import Any

from megatron.energon import Cooker, Sample, basic_sample_keys, edataclass, stateless

from energon_pack.encoding import DocumentTokenizer, masked_document
from energon_pack.samples import EncodedSample
from energon_pack.task_encoders._base import PackingTaskEncoder

__all__ = ["PromptResponseSample", "SFTPackingTaskEncoder", "cook_prompt_response"]


@edataclass
class PromptResponseSample(Sample):
    """One supervised fine-tuning example."""

    #: The user's prompt.
    prompt: str
    #: The answer the model is trained to produce.
    response: str
    #: Optional system message (chat template only).
    system: str | None = None


@stateless
def cook_prompt_response(sample: dict) -> PromptResponseSample:
    """Cook a crude JSONL sample ``{"prompt": ..., "response": ...}``."""
    record = sample.get("json")
    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), str) for k in ("prompt", "response")
    ):
        raise ValueError(
            f"JSONL sample {sample.get('__key__')!r} needs string fields 'prompt' and "
            f"'response' (got {sorted(record) if isinstance(record, dict) else record!r})."
        )
    return PromptResponseSample(
        **basic_sample_keys(sample),
        prompt=record["prompt"],
        response=record["response"],
        system=record.get("system"),
    )


def _ids(rendered: Any) -> list[int]:
    """``apply_chat_template(tokenize=True)`` returns a list or a BatchEncoding by version."""
    if isinstance(rendered, dict) or hasattr(rendered, "input_ids"):
        rendered = rendered["input_ids"]
    return [int(t) for t in rendered]


class SFTPackingTaskEncoder(PackingTaskEncoder[PromptResponseSample]):
    """Packs prompt/response documents with the loss on response tokens only.

    Args:
        tokenizer: A transformers tokenizer or a local tokenizer directory.
        use_chat_template: Render with the tokenizer's chat template (``None``: if it has one).
        add_bos, add_eos, eod_token_id: Without a chat template, as in ``LLMPackingTaskEncoder``.
        **packing: :class:`~energon_pack.task_encoders.PackingConfig` fields.
    """

    cookers = (Cooker(cook_prompt_response),)
    #: Tokenizing draws no random numbers: ``encode_sample`` runs unseeded (a subclass that
    #: overrides ``encode_document``, or a tokenizer not from transformers, is seeded).
    encode_draws_random = False

    def __init__(
        self,
        tokenizer: Any,
        *,
        use_chat_template: bool | None = None,
        add_bos: bool | None = None,
        add_eos: bool | None = None,
        eod_token_id: int | None = None,
        **packing: Any,
    ) -> None:
        self.tokenizer = DocumentTokenizer(
            tokenizer, add_bos=add_bos, add_eos=add_eos, eod_token_id=eod_token_id
        )
        self.use_chat_template = self.tokenizer.use_chat_template(use_chat_template)
        packing.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        super().__init__(**packing)

    def _seeds_encode(self) -> bool:
        return super()._seeds_encode() or self.tokenizer.draws_random

    def _chat_ids(self, sample: PromptResponseSample) -> tuple[list[int], list[int]]:
        tok = self.tokenizer.tokenizer
        messages = [{"role": "system", "content": sample.system}] if sample.system else []
        messages.append({"role": "user", "content": sample.prompt})
        prompt = _ids(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        full = _ids(
            tok.apply_chat_template(
                [*messages, {"role": "assistant", "content": sample.response}], tokenize=True
            )
        )
        if full[: len(prompt)] != prompt:
            raise ValueError(
                f"sample {sample.__key__!r}: the chat template does not render the prompt as a "
                "prefix of the conversation, so the response tokens cannot be located; pass "
                "use_chat_template=False or fix the template."
            )
        return prompt, full[len(prompt) :]

    def encode_document(self, sample: PromptResponseSample) -> EncodedSample:
        if self.use_chat_template:
            tokens, loss_mask = masked_document(*self._chat_ids(sample))
        else:
            tokens, loss_mask = self.tokenizer.document(
                self.tokenizer.encode_text(sample.prompt),
                self.tokenizer.encode_text(sample.response),
            )
        return EncodedSample.derive_from(sample, tokens=tokens, loss_mask=loss_mask)
