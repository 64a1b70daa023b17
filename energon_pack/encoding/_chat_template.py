# SPDX-License-Identifier: Apache-2.0
"""What a processor's ``apply_chat_template(messages, tokenize=True)`` adds to the rendered
conversation beyond the tokenizer's ``apply_chat_template(tokenize=True)``.

transformers' ``ProcessorMixin.apply_chat_template`` tokenizes the rendered prompt with
``add_special_tokens=True`` unless it starts with the tokenizer's BOS text; the tokenizer's own
``apply_chat_template`` never adds special tokens. With a Llama/Mistral tokenizer (its
post-processor puts ``<s>`` first) and a template that does not write ``{{ bos_token }}``::

    tokenizer.apply_chat_template(messages, tokenize=True)   ->      [USER] hi ...
    processor.apply_chat_template(messages, tokenize=True)   -> <s>  [USER] hi ...
"""

from __future__ import annotations

from typing import Any

__all__ = ["processor_bos"]


def processor_bos(tokenizer: Any) -> int | None:
    """The BOS id ``tokenizer``'s own post-processor puts in front of a text, else None: what a
    processor puts in front of a rendered conversation that does not start with BOS."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None or not callable(tokenizer):
        return None
    added = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    return int(bos) if added[:1] == [bos] and plain[:1] != [bos] else None
