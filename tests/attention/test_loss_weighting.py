# SPDX-License-Identifier: Apache-2.0
"""The loss users expect: packed training with gradient accumulation equals one big step.

A packed micro-batch holds a varying number of target tokens, so the mean per micro-batch,
averaged over accumulation steps, weights tokens unequally. Dividing each micro-batch's *sum*
by the target tokens of the whole step (transformers: ``num_items_in_batch``) gives the
token-mean of one step over all documents.
"""

from __future__ import annotations

import torch
from model_families import FAMILIES, build_model, packed_batch


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_four_accumulation_steps_equal_one_step_over_all_documents() -> None:
    family = next(f for f in FAMILIES if f.name.startswith("mistral"))
    model = build_model(family, "sdpa").train()
    micro = [packed_batch([[20, 12], [7, 3]], 34, seed=s) for s in range(2)]
    micro += [packed_batch([[30, 4]], 34, seed=2), packed_batch([[5], [2, 2, 2]], 8, seed=3)]
    # one step over all documents, each run alone, token-mean loss
    docs = [d for _, rows in micro for row in rows for d in row]
    total = sum(d.length - 1 for d in docs)
    model.zero_grad()
    for d in docs:
        logits = model(input_ids=d.tokens.view(1, -1)).logits[0]
        ce = torch.nn.functional.cross_entropy(logits[:-1], d.tokens[1:], reduction="sum")
        (ce / total).backward()
    expected = _grads(model).clone()
    # four packed micro-batches, each normalised by the step's target-token count
    step_tokens = sum(int((b.labels != -100).sum()) for b, _ in micro)
    assert step_tokens == total
    model.zero_grad()
    for batch, _ in micro:
        kwargs = batch.hf_kwargs("sdpa", config=model.config)
        model(**kwargs, num_items_in_batch=step_tokens).loss.backward()
    got = _grads(model)
    assert float((got - expected).norm() / expected.norm()) < 1e-5
    # the naive mean of per-micro-batch means is a different gradient
    model.zero_grad()
    for batch, _ in micro:
        (model(**batch.hf_kwargs("sdpa", config=model.config)).loss / len(micro)).backward()
    assert float((_grads(model) - expected).norm() / expected.norm()) > 1e-2
