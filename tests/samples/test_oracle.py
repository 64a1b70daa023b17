# SPDX-License-Identifier: Apache-2.0
"""The oracle: packing changes no logit and no loss.

A tiny Llama (2 layers, float32, random seeded weights, GQA) runs a packed batch through each
attention path; every document's logits must equal that document run alone (atol 1e-5), and
HF's mean loss over the batch must equal the token-weighted mean of the per-document losses.
"""

from __future__ import annotations

import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from energon_pack.samples import EncodedSample, collate_packs, pack_documents  # noqa: E402
from energon_pack_tools import (  # noqa: E402
    document_logits,
    document_loss,
    make_document,
    tiny_causal_lm,  # noqa: E402
)

VOCAB = 97


def _docs(seed: int, lengths: list[int]) -> list[EncodedSample]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, n in enumerate(lengths):
        tokens = torch.randint(0, VOCAB, (n,), generator=gen)
        mask = torch.rand(n, generator=gen) < 0.8
        out.append(make_document(f"d{i}", tokens, mask))
    return out


# rows of document lengths: a length-1 document, an exactly full row, padding only at the end,
# a single document, and alignment padding inside the row
CASES = [
    ([[5, 1, 9], [15]], 1, 16),  # length-1 doc; one doc + 1 tail pad
    ([[16], [4, 4, 4, 4]], 1, 16),  # exactly full rows
    ([[3, 6, 2]], 4, 16),  # aligned to 4: slots 4, 8, 4
    ([[7]], 1, 7),  # one document, no padding
]


def _batch_and_docs(case):
    rows, alignment, pad_to = case
    packs, docs = [], []
    for r, lengths in enumerate(rows):
        row_docs = _docs(100 + r, lengths)
        docs.append(row_docs)
        packs.append(pack_documents(row_docs, alignment=alignment))
    return collate_packs(packs, pad_to=pad_to), docs


def _check_logits(logits: torch.Tensor, batch, docs, model) -> None:
    for r, row_docs in enumerate(docs):
        start = 0
        for d, padded in zip(row_docs, batch.doc_lengths_padded[r]):
            n = d.length
            ref = document_logits(model, d.tokens)
            torch.testing.assert_close(logits[r, start : start + n], ref, atol=1e-5, rtol=0)
            start += padded


@pytest.fixture(scope="module")
def models() -> dict:
    return {
        impl: tiny_causal_lm(VOCAB, seed=0, attn_implementation=impl)
        for impl in ("sdpa", "eager", "flex_attention")
    }


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_packed_logits_equal_per_document_logits(models, case, impl: str) -> None:
    batch, docs = _batch_and_docs(case)
    with torch.no_grad():
        logits = models[impl](**batch.hf_kwargs(impl, config=models[impl])).logits
    _check_logits(logits, batch, docs, models["sdpa"])


@pytest.mark.parametrize("case", CASES[:3])
def test_flex_attention_logits_equal_per_document_logits(models, case) -> None:
    # torch 2.13 runs FlexAttention on CPU unfused in eager mode, forward only (no backward)
    batch, docs = _batch_and_docs(case)
    with torch.no_grad():
        logits = models["flex_attention"](
            **batch.hf_kwargs("flex_attention", config=models["flex_attention"])
        ).logits
    _check_logits(logits, batch, docs, models["sdpa"])


@pytest.mark.parametrize("case", CASES)
def test_hf_loss_equals_token_weighted_per_document_loss(models, case) -> None:
    batch, docs = _batch_and_docs(case)
    model = models["sdpa"]
    with torch.no_grad():
        loss = model(**batch.hf_kwargs("sdpa", config=model)).loss
    sums = [document_loss(model, d.tokens, d.loss_mask) for row in docs for d in row]
    expected = sum(s for s, _ in sums) / sum(c for _, c in sums)
    assert abs(float(loss) - expected) < 1e-5
    # and our own aligned labels give the same number without HF's shift
    with torch.no_grad():
        logits = model(**batch.hf_kwargs("sdpa", config=model, with_labels=False)).logits
    ours = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.labels.flatten())
    assert abs(float(ours) - expected) < 1e-5


def test_random_packs_sdpa_oracle(models) -> None:
    rng = random.Random(7)
    rows = []
    for _ in range(3):
        row, left = [], 40
        while left > 1 and rng.random() < 0.8:
            n = rng.randint(1, left)
            row.append(n)
            left -= n
        rows.append(row or [40])
    batch, docs = _batch_and_docs((rows, 1, 40))
    with torch.no_grad():
        logits = models["sdpa"](**batch.hf_kwargs("sdpa", config=models["sdpa"])).logits
    _check_logits(logits, batch, docs, models["sdpa"])


def test_backward_through_sdpa_packed_batch_is_finite(models) -> None:
    # padding rows attend to their own slot, so no softmax row is empty and no NaN appears
    batch, _ = _batch_and_docs(CASES[0])
    model = models["sdpa"]
    model.zero_grad()
    model(**batch.hf_kwargs("sdpa", config=model)).loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash_attention_2 needs a CUDA GPU")
def test_flash_attention_2_equals_dense_reference() -> None:  # pragma: no cover - GPU only
    pytest.importorskip("flash_attn")
    batch, docs = _batch_and_docs(CASES[0])
    ref_model = tiny_causal_lm(VOCAB, attn_implementation="sdpa").cuda().to(torch.bfloat16)
    fa_model = tiny_causal_lm(VOCAB, attn_implementation="flash_attention_2").cuda()
    fa_model = fa_model.to(torch.bfloat16)
    cuda = {
        k: v.cuda() if isinstance(v, torch.Tensor) else v
        for k, v in batch.hf_kwargs("flash_attention_2", config=fa_model).items()
    }
    dense = {k: v.cuda() for k, v in batch.hf_kwargs("sdpa", config=ref_model).items()}
    with torch.no_grad():
        out = fa_model(**cuda).logits.float()
        ref = ref_model(**dense).logits.float()
    real = (batch.segment_ids > 0).cuda()
    torch.testing.assert_close(out[real], ref[real], atol=2e-2, rtol=2e-2)
