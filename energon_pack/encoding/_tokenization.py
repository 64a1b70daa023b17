# SPDX-License-Identifier: Apache-2.0
"""Tokenizer handling shared by the encoders: load offline, add BOS and EOS/EOD, build documents.

A document is ``[BOS] + tokenizer(text) + [EOD]``; EOD is a target, BOS is not. With BOS=2,
EOS=3 and ``"the cat" -> [6, 5]``: ``DocumentTokenizer(tok).encode("the cat") -> [2, 6, 5, 3]``;
``document([9], [6, 5])`` -> tokens ``[2, 9, 6, 5, 3]``, loss mask ``F F T T T``. A tokenizer
is a transformers tokenizer, a local directory (``local_files_only=True``) or a Hub id (loaded
as transformers would, under the user's own ``HF_HUB_OFFLINE``; the environment is not changed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from energon_pack.encoding._remote_code import refuse_remote_code

__all__ = ["DocumentTokenizer", "load_tokenizer", "masked_document"]

logger = logging.getLogger(__name__)


#: Files of a saved transformers tokenizer; a directory holding none of them holds no tokenizer.
TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
)


_TOKENIZER_OPT_IN = (
    "if you trust its code, pass load_tokenizer(path, trust_remote_code=True) or a tokenizer "
    "you loaded with AutoTokenizer.from_pretrained(path, trust_remote_code=True) (energon-pack "
    "analyze: --trust-remote-code)."
)


def load_tokenizer(tokenizer: Any, *, trust_remote_code: bool = False) -> Any:
    """Return ``tokenizer`` itself, or load it from a local directory path (offline), or from a
    Hub id (``org/name``: ``AutoTokenizer.from_pretrained``, the user's hub settings).

    A directory without any of :data:`TOKENIZER_FILES` is refused with a message naming it
    (transformers would say "install sentencepiece or tiktoken", naming no path). A directory
    whose configs ask for remote code (an ``auto_map``) is refused unless ``trust_remote_code``
    (then its Python files run); transformers is always called with ``trust_remote_code`` as
    given, so it never prompts.
    """
    if isinstance(tokenizer, (str, Path)):
        from transformers import AutoTokenizer

        path = Path(tokenizer)
        if not path.is_dir():
            return _load_hub_tokenizer(str(tokenizer), trust_remote_code)
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            found = sorted(p.name for p in path.iterdir())[:5]
            raise ValueError(
                f"{path} holds no tokenizer: expected tokenizer.json or tokenizer_config.json "
                f"(what tokenizer.save_pretrained(dir) writes), found "
                f"{', '.join(found) if found else 'an empty directory'}."
            )
        if not trust_remote_code:
            refuse_remote_code(path, what="tokenizer", opt_in=_TOKENIZER_OPT_IN)
        try:
            return AutoTokenizer.from_pretrained(
                str(path), local_files_only=True, trust_remote_code=trust_remote_code
            )
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"cannot load a tokenizer from {path}: {exc}") from exc
    if not callable(getattr(tokenizer, "encode", None)):
        raise ValueError(
            f"tokenizer {tokenizer!r} has no encode(); pass a transformers tokenizer or a path."
        )
    return tokenizer


def _load_hub_tokenizer(name: str, trust_remote_code: bool = False) -> Any:
    """A Hugging Face Hub id (``org/name``) through ``AutoTokenizer.from_pretrained``, which
    follows the user's own settings (``HF_HUB_OFFLINE``, the cache); anything else is refused."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id
    from transformers import AutoTokenizer

    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ValueError(
            f"tokenizer path {name!r} is not a local directory nor a Hub id (org/name): pass "
            "a transformers tokenizer object, a Hub id, or a directory written by "
            "tokenizer.save_pretrained(dir)."
        ) from None
    try:
        return AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(
            f"tokenizer {name!r} is not a local directory and cannot be loaded as a Hub id "
            f"({type(exc).__name__}: {exc}); download it once (online, or into the cache "
            "HF_HUB_OFFLINE reads), or pass a local directory or a tokenizer object."
        ) from exc


def masked_document(
    prompt: Sequence[int], target: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, loss_mask)`` of ``prompt + target`` with the loss on ``target`` only.

    ``([5, 6], [7])`` -> tokens ``[5, 6, 7]``, loss mask ``F F T``. An empty ``target`` leaves
    nothing to learn: both tensors are empty (the document is dropped and counted).
    """
    return _document((), prompt, target, ())


def _document(
    head: Sequence[int], prompt: Sequence[int], target: Sequence[int], tail: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`masked_document` of ``(head + prompt, target + tail)`` in one int64 array: lists
    and tuples of ints joined into one list (a pointer copy) and read once (``np.fromiter``,
    about 30 ns per token; ``torch.tensor`` on a list: 186), other sequences concatenated."""
    parts = (head, prompt, target, tail)
    if not len(target) + len(tail):
        tokens = np.zeros(0, dtype=np.int64)
    elif all(isinstance(p, (list, tuple)) for p in parts):
        ids = target if not (head or prompt or tail) else [*head, *prompt, *target, *tail]
        tokens = np.fromiter(ids, dtype=np.int64, count=len(ids))
    else:
        tokens = np.concatenate([np.asarray(p, dtype=np.int64).reshape(-1) for p in parts])
    loss_mask = np.empty(len(tokens), dtype=bool)
    loss_mask.fill(True)  # np.ones costs twice as much
    loss_mask[: len(head) + len(prompt) if len(tokens) else 0] = False
    return torch.from_numpy(tokens), torch.from_numpy(loss_mask)


def _is_transformers(tokenizer: Any) -> bool:
    from transformers import PreTrainedTokenizerBase

    return isinstance(tokenizer, PreTrainedTokenizerBase)


@dataclass(frozen=True, kw_only=True)
class _Ids:
    bos: int | None
    eod: int | None
    pad: int


class DocumentTokenizer:
    """Wraps a tokenizer: ``encode(text)`` gives the token ids of one document.

    Args:
        tokenizer: A transformers tokenizer or a local tokenizer directory.
        add_bos: Prepend the BOS token. ``None`` (default): when the tokenizer has one (Llama
            does, Qwen and BERT do not); ``True``: error if it has none.
        add_eos: Append the EOD token: ``eod_token_id``, else the tokenizer's EOS, else its SEP
            (BERT-style tokenizers). ``None`` (default): when one exists (a warning is logged
            when none does); ``True``: error if none exists.
        eod_token_id: The end-of-document token, if not the EOS token.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        add_bos: bool | None = None,
        add_eos: bool | None = None,
        eod_token_id: int | None = None,
    ) -> None:
        self.tokenizer = load_tokenizer(tokenizer)
        # transformers warns "Token indices sequence length is longer than the specified maximum
        # sequence length" for long texts; the encoders apply their own over-long policy.
        self._encode_options = {"verbose": False} if _is_transformers(self.tokenizer) else {}
        #: Whether encoding may draw from ``random``/NumPy/torch (any tokenizer but transformers').
        self.draws_random = not self._encode_options
        bos = getattr(self.tokenizer, "bos_token_id", None)
        eod = eod_token_id
        for name in ("eos_token_id", "sep_token_id"):
            if eod is None:
                eod = getattr(self.tokenizer, name, None)
        if add_bos and bos is None:
            raise ValueError(
                "add_bos=True but the tokenizer has no bos_token_id; pass add_bos=None (BOS "
                "when the tokenizer has one) or add_bos=False."
            )
        if add_eos and eod is None:
            raise ValueError(
                "add_eos=True but the tokenizer has no EOS or SEP token; pass eod_token_id=... "
                "or add_eos=False."
            )
        if add_eos is None and eod is None:
            logger.warning(
                "tokenizer %s has no EOS or SEP token: documents get no end-of-document token "
                "(pass eod_token_id=... to add one).",
                type(self.tokenizer).__name__,
            )
        pad = getattr(self.tokenizer, "pad_token_id", None)
        self.ids = _Ids(
            bos=bos if add_bos is not False else None,
            eod=eod if add_eos is not False else None,
            pad=int(pad if pad is not None else (eod if eod is not None else 0)),
        )

    @property
    def pad_token_id(self) -> int:
        """The padding id (the tokenizer's PAD, else EOD, else 0)."""
        return self.ids.pad

    def use_chat_template(self, requested: bool | None) -> bool:
        """Whether to render with the chat template: ``requested``, or with ``None`` whether the
        tokenizer has one; ``True`` for a tokenizer without one is a ValueError."""
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        if requested and not has_template:
            raise ValueError("use_chat_template=True but the tokenizer has no chat_template.")
        return has_template if requested is None else requested

    def encode_text(self, text: str) -> list[int]:
        """Token ids of ``text`` without any special token."""
        ids = self.tokenizer.encode(text, add_special_tokens=False, **self._encode_options)
        # transformers returns a new list per call: no copy (3-10 us per 1000 tokens)
        return ids if self._encode_options and type(ids) is list else list(ids)

    def _ends(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``((BOS,), (EOD,))`` according to ``add_bos`` / ``add_eos`` (``()`` where off)."""
        head = (self.ids.bos,) if self.ids.bos is not None else ()
        tail = (self.ids.eod,) if self.ids.eod is not None else ()
        return head, tail

    def encode(self, text: str) -> list[int]:
        """``[BOS] + encode_text(text) + [EOD]`` according to ``add_bos`` / ``add_eos``."""
        head, tail = self._ends()
        return [*head, *self.encode_text(text), *tail]

    def document(
        self, prompt: Sequence[int], target: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens, loss_mask)`` of ``[BOS] + prompt + target + [EOD]``, loss on target + EOD.

        BOS and ``prompt`` are not trained on. Empty tensors when ``target + [EOD]`` is empty
        (nothing to learn); see :func:`masked_document`.
        """
        head, tail = self._ends()
        return _document(head, prompt, target, tail)

    def token_id(self, token: str) -> int:
        """The id of a (special) token; ValueError if the vocabulary lacks it."""
        tid = self.tokenizer.convert_tokens_to_ids(token)
        if tid is None or tid == getattr(self.tokenizer, "unk_token_id", None):
            raise ValueError(f"token {token!r} is not in the tokenizer's vocabulary; add it.")
        return int(tid)
