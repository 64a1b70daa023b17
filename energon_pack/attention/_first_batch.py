# SPDX-License-Identifier: Apache-2.0
"""The first-batch check: the user's real packed batch through the user's real model, each
document compared with that document run alone.

:func:`check_model` proves packing on a tiny random copy of the model's class; it cannot see
what appears only at full size, with the real weights, in train mode, or in code the class name
does not show. :func:`check_first_batch` runs the call training makes, once, at the start::

    batch = next(iter(loader))
    check_first_batch(model, batch, "sdpa")        # raises PackingNotExactError if not exact
    for batch in loader:
        loss = model(**batch.hf_kwargs("sdpa", config=model)).loss

Trace on rows ``[a a a b b p]`` and ``[c c c c p p]`` (``max_tokens=8``): the documents at
the latest offsets come first (``b``, then ``c``); the packed run's logits at ``b``'s two
positions are compared with ``model(input_ids=[b b])``, ``c``'s four with ``model([c c c c])``;
``b`` and ``c`` right-padded to ``[[b b p p], [c c c c]]`` with a 2-D padding mask give the
model's own noise, from which the tolerance is derived (see :func:`check_first_batch`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F  # noqa: N812

from energon_pack.attention._compat import PackingNotExactError
from energon_pack.attention._experiment import model_outputs, no_randomness
from energon_pack.attention._instance import vouch

__all__ = ["FirstBatchReport", "check_first_batch"]

#: Smallest tolerance per dtype, relative to ``max(1, largest |output| alone)``: a few units
#: in the last place of the dtype (float32 1.2e-7, bfloat16 7.8e-3, float16 9.8e-4).
FLOORS = {torch.float32: 1e-5, torch.float64: 1e-9, torch.bfloat16: 3e-2, torch.float16: 4e-3}
#: Tolerance = NOISE_FACTOR x the padded-batch noise (at least the floor) ...
NOISE_FACTOR = 4.0
#: ... and never more than CAP_FACTOR x the floor: noise that large is not rounding (dropout
#: left on, BatchNorm, expert capacity: the model mixes a batch's documents even unpacked).
CAP_FACTOR = 100.0
#: Batch fields the check refuses (it covers text batches).
_MEDIA = ("pixel_values", "pixel_values_videos")
_NOT_TEXT = ("mrope_position_ids", "token_type_ids", "moe_mm_token_type_ids")
_MODEL = object()


@dataclass(frozen=True, kw_only=True)
class FirstBatchReport:
    """What :func:`check_first_batch` measured (all within ``tolerance``)."""

    #: Largest |logit| (base models: |hidden state|) difference, packed vs alone.
    max_difference: float
    #: |model's packed loss - the token-weighted loss of the documents alone|; None: no loss.
    loss_difference: float | None
    #: The bound both were held to (the loss: twice this, see :func:`check_first_batch`).
    tolerance: float
    #: Largest difference between the padded batch and the documents alone.
    noise: float
    #: ``__key__`` of each document checked.
    documents: tuple[str, ...]
    #: Wall time of the check.
    seconds: float


class _Doc(NamedTuple):
    key: str
    row: int
    start: int
    length: int


def _choose(batch: Any, max_documents: int, max_tokens: int | None) -> list[_Doc]:
    """Documents at the latest offsets first, round-robin over rows, while the padded batch
    (``documents x longest``) stays within ``max_tokens`` (default a quarter of the batch's
    tokens), at least one document."""
    meta = batch.metadata
    rows = []
    for r, (lengths, padded) in enumerate(zip(meta.doc_lengths, meta.doc_lengths_padded)):
        starts = [sum(padded[:i]) for i in range(len(lengths))]
        docs = [_Doc(batch.sample_keys[r][i], r, starts[i], n) for i, n in enumerate(lengths)]
        rows.append(docs[::-1])
    order = [d for depth in range(max(map(len, rows))) for row in rows if depth < len(row)
             for d in [row[depth]]]  # fmt: skip
    budget = batch.tokens.numel() // 4 if max_tokens is None else max_tokens
    chosen: list[_Doc] = []
    for doc in order:
        longest = max([doc.length, *(d.length for d in chosen)])
        if chosen and (len(chosen) + 1) * longest > budget:
            continue
        chosen.append(doc)
        if len(chosen) == max_documents:
            break
    return chosen


def _targets_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[float, int]:
    """Sum of the cross-entropy over the targets (in float32) and their count."""
    mask = labels != -100
    if not bool(mask.any()):
        return 0.0, 0
    loss = F.cross_entropy(logits[mask].float(), labels[mask], reduction="sum")
    return float(loss), int(mask.sum())


def _refuse_media(batch: Any) -> None:
    """ValueError for a batch with images, videos, mRoPE ids or token types: its documents
    alone would need their own media and positions, which this check does not cut out."""
    what = [k for k in _MEDIA if getattr(batch, k, None) is not None and getattr(batch, k).numel()]
    what += [k for k in _NOT_TEXT if getattr(batch, k, None) is not None]
    if what:
        raise ValueError(
            f"check_first_batch covers text batches; this {type(batch).__name__} has "
            f"{', '.join(what)}. Check the language model on a text batch of the same pack "
            "size, and the VLM with check_model(model, impl, pack_size=...)"
        )


def _model_config(model: Any) -> Any:
    """``model.config``, looking inside wrappers (DDP/FSDP ``.module``, compile ``._orig_mod``)."""
    while getattr(model, "config", None) is None and hasattr(model, "module"):
        model = model.module
    inner = getattr(model, "_orig_mod", model)
    return getattr(inner, "config", None)


def _alone_and_padded(
    model: torch.nn.Module, batch: Any, docs: list[_Doc], pad_id: int
) -> tuple[list[torch.Tensor], float]:
    """Each document alone (its own positions), and the largest difference between the
    documents right-padded into one batch with a 2-D padding mask and the same alone."""
    tokens = [batch.tokens[d.row, d.start : d.start + d.length] for d in docs]
    alone = [model_outputs(model(input_ids=t[None]))[0] for t in tokens]
    longest = max(d.length for d in docs)
    ids = torch.full((len(docs), longest), pad_id, dtype=tokens[0].dtype, device=tokens[0].device)
    mask = torch.zeros_like(ids)
    for i, t in enumerate(tokens):
        ids[i, : len(t)], mask[i, : len(t)] = t, 1
    padded = model_outputs(model(input_ids=ids, attention_mask=mask))
    noise = max(_diff(padded[i, : d.length], a) for i, (d, a) in enumerate(zip(docs, alone)))
    return alone, noise


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    value = float((a.float() - b.float()).abs().max())
    return value if value == value else float("inf")  # NaN counts as the largest


def _tolerance(dtype: torch.dtype, alone: list[torch.Tensor], noise: float) -> tuple[float, str]:
    scale = max([1.0, *(float(a.float().abs().max()) for a in alone)])
    floor = FLOORS.get(dtype, 1e-5) * scale
    tol = min(max(NOISE_FACTOR * noise, floor), CAP_FACTOR * floor)
    rule = (
        f"{NOISE_FACTOR:g} x the padded-batch noise {noise:.3g}, at least the {dtype} floor "
        f"{floor:.3g}, at most {CAP_FACTOR:g} x it"
    )
    return tol, rule


def _batch_loss(out: torch.Tensor, batch: Any, docs: list[_Doc], alone: list[torch.Tensor]):
    """The token-weighted loss of the batch with the checked documents' logits taken from
    their runs alone (the others from the packed run), or None without targets."""
    total, count = 0.0, 0
    checked = {(d.row, d.start): a for d, a in zip(docs, alone)}
    meta = batch.metadata
    for r, (lengths, padded) in enumerate(zip(meta.doc_lengths, meta.doc_lengths_padded)):
        start = 0
        for n, p in zip(lengths, padded):
            logits = checked.get((r, start), out[r, start : start + n])
            s, c = _targets_loss(logits, batch.labels[r, start : start + n])
            total, count, start = total + s, count + c, start + p
    return total / count if count else None


def check_first_batch(
    model: torch.nn.Module,
    batch: Any,
    attn_implementation: str | None = None,
    *,
    max_documents: int = 8,
    max_tokens: int | None = None,
    tolerance: float | None = None,
    config: Any = _MODEL,
) -> FirstBatchReport:
    """Run ``batch`` through ``model`` as training will and compare it with its documents alone.

    The packed call is ``model(**batch.hf_kwargs(impl, config=config))`` in the model's own
    dtype, device and mode (train mode included: dropout is set to 0 for the check and restored,
    as are buffers and the RNG), under ``torch.no_grad``. Up to ``max_documents`` documents, at
    the latest offsets of their rows first and while their padded batch (documents x longest)
    fits ``max_tokens`` (default: a quarter of the batch's ``B x L`` tokens), are run alone
    (``model(input_ids=doc)``, the model's own positions); each one's logits (base models: last
    hidden state) must match the packed run's, and the model's packed loss the token-weighted
    cross-entropy with those documents' logits taken from their runs alone.

    Tolerance rule (unless ``tolerance`` is given): the same documents right-padded into one
    batch with a 2-D padding mask differ from their runs alone only by the model's rounding
    in this dtype and on this device; the tolerance is 4x that noise, at least a floor per dtype
    (:data:`FLOORS`: float32 1e-5, bfloat16 3e-2, float16 4e-3, times ``max(1, largest |output|)``)
    and at most 100x the floor. The loss is held to twice the tolerance (a cross-entropy moves
    by at most twice the largest logit change).

    Args:
        model: the model as it trains (wrapped or not), on its device.
        batch: a packed text batch (``PackedTextBatch``), e.g. the loader's first.
        attn_implementation: as passed to ``hf_kwargs``; default the model's loaded one.
        max_documents: most documents run alone (bounds the cost; see the benchmark
            ``tests/benchmarks/first_batch_check.py``).
        max_tokens: most tokens of the padded batch (documents x longest); the check then
            costs about 1.5 forward passes of the batch, under one training step.
        tolerance: a fixed bound instead of the rule above.
        config: what training passes as ``hf_kwargs(config=...)``; default the model.

    Returns:
        A :class:`FirstBatchReport`.

    Raises:
        PackingNotExactError: a document (or the loss) differs by more than the tolerance; the
            message names the document, its difference and the tolerance (or ``hf_kwargs``
            refused the model).
        ValueError: the batch has images or videos (the check covers text batches).
    """
    began = time.perf_counter()
    model_config = _model_config(model)
    impl = attn_implementation or getattr(model_config, "_attn_implementation", None) or "sdpa"
    param = next(p for p in model.parameters() if p.is_floating_point())
    _refuse_media(batch)
    batch = batch.to(param.device)
    kwargs = batch.hf_kwargs(impl, config=model if config is _MODEL else config)
    docs = _choose(batch, max_documents, max_tokens)
    pad_id = getattr(model_config, "pad_token_id", None)
    with no_randomness(model):
        packed = model(**kwargs)
        alone, noise = _alone_and_padded(model, batch, docs, pad_id if pad_id is not None else 0)
    out = model_outputs(packed).reshape(*batch.tokens.shape, -1)  # hybrids: one (1, B*L) row
    tol, rule = (
        (tolerance, "given") if tolerance is not None else _tolerance(param.dtype, alone, noise)
    )
    diffs = [_diff(out[d.row, d.start : d.start + d.length], a) for d, a in zip(docs, alone)]
    worst = max(range(len(docs)), key=diffs.__getitem__)
    name = f"{type(model).__name__} with {impl} (first-batch check)"
    if diffs[worst] > tol:
        d = docs[worst]
        raise PackingNotExactError(
            name,
            f"document {d.key!r} (row {d.row}, tokens {d.start}..{d.start + d.length - 1}) "
            f"differs from the same document run alone by {diffs[worst]:.3g} (largest output "
            f"difference), more than the tolerance {tol:.3g} ({rule})",
            _REMEDY,
        )
    loss_diff = None
    loss = getattr(packed, "loss", None)
    if loss is not None and "labels" in kwargs and getattr(packed, "logits", None) is not None:
        reference = _batch_loss(out, batch, docs, alone)
        loss_diff = None if reference is None else abs(float(loss) - reference)
        if loss_diff is not None and not loss_diff <= 2 * tol:
            raise PackingNotExactError(
                name,
                f"the model's loss on the packed batch differs by {loss_diff:.3g} from the "
                f"token-weighted cross-entropy of its documents (tolerance {2 * tol:.3g}): "
                "a term beyond the documents' own losses (e.g. a router load-balancing loss) "
                "or the label shift sees the packed rows",
                _REMEDY,
            )
    vouch(model, impl)  # code the class does not show is now verified on this instance
    return FirstBatchReport(
        max_difference=diffs[worst],
        loss_difference=loss_diff,
        tolerance=tol,
        noise=noise,
        documents=tuple(d.key for d in docs),
        seconds=time.perf_counter() - began,
    )


_REMEDY = (
    "pass config=model to hf_kwargs (check_model then builds this model's masks: windows, "
    "chunks, bidirectional blocks), remove the mechanism that mixes a row's documents "
    "(code that sees the whole row, batch-level statistics), or train this model unpacked "
    "(see docs/howto/kernels.md)"
)
