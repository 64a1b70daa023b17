# SPDX-License-Identifier: Apache-2.0
"""One factory for hand-made documents in tests: ``make_document(key, tokens, loss_mask)``.

    >>> doc = make_document("a", [5, 6, 7])                   # every token a target
    >>> doc.tokens.tolist(), doc.loss_mask.tolist()
    ([5, 6, 7], [True, True, True])
    >>> make_document("b", range(1, 4), [0, 1, 1]).loss_mask.tolist()
    [False, True, True]

Extra keyword arguments become fields of ``document_type`` (``EncodedSample`` by default, or a
modality's document type such as ``EncodedCaptioningSample`` with its pixel fields).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from energon_pack.samples import EncodedSample

__all__ = ["make_document"]


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
