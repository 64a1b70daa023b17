# SPDX-License-Identifier: Apache-2.0
"""A tiny word-level tokenizer trained offline, saved as a transformers tokenizer directory.

Real tokenizers need the hub; tests must not. :func:`make_tokenizer` trains a ``WordLevel``
model (one id per whitespace-separated word, punctuation split off) with the ``tokenizers``
library on the given texts, wraps it in ``PreTrainedTokenizerFast`` with BOS/EOS/PAD/UNK and an
image placeholder token, and saves it with ``save_pretrained``::

    >>> path = make_tokenizer(tmp / "tok", ["the cat", "a cat"])          # doctest: +SKIP
    >>> tok = load_tokenizer(path)                                         # doctest: +SKIP
    >>> tok("the cat", add_special_tokens=False).input_ids                 # doctest: +SKIP
    [6, 5]          # specials take ids 0..4: <pad> <unk> <s> </s> <|image_pad|>

With ``chat_template=True`` the saved tokenizer carries a minimal chat template
(``<|user|> ... <|assistant|> ... </s>``) so SFT code paths that call ``apply_chat_template``
can be tested without downloading one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "CHAT_TEMPLATE",
    "IMAGE_TOKEN",
    "SPECIAL_TOKENS",
    "make_tokenizer",
]

#: The image placeholder token (named like Qwen2-VL's).
IMAGE_TOKEN = "<|image_pad|>"

#: Special tokens in id order: pad=0, unk=1, bos=2, eos=3, image=4, user=5, assistant=6.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    IMAGE_TOKEN,
    "<|user|>",
    "<|assistant|>",
)

#: A minimal Jinja chat template: each message is ``<|role|> content`` and assistant turns end
#: in ``</s>``; ``add_generation_prompt`` appends ``<|assistant|>``.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|> ' + m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ ' </s>' }}{% endif %}{{ ' ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)


def make_tokenizer(path: Path | str, texts: Sequence[str], *, chat_template: bool = True) -> Path:
    """Train a word-level tokenizer on ``texts`` and save it (transformers format) to ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL_TOKENS), min_frequency=1)
    tok.train_from_iterator(list(texts), trainer=trainer)
    from tokenizers import decoders

    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=[IMAGE_TOKEN, "<|user|>", "<|assistant|>"],
    )
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))
    return path
