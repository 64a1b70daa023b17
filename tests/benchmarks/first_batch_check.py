# SPDX-License-Identifier: Apache-2.0
"""Cost of ``check_first_batch`` vs one training step, on a small Llama.

Run: ``python tests/benchmarks/first_batch_check.py``. A Llama of 4 layers, hidden 256,
vocabulary 32000 (random weights, float32, sdpa, train mode), packed batches of 2 rows at pack
sizes 1024 and 2048 (documents of 32..pack/3 tokens from the real packer). One training step is
forward + backward + AdamW step on ``batch.hf_kwargs("sdpa", config=model)``; the check is
``check_first_batch(model, batch)`` with its defaults. Times are medians of ``REPEATS`` runs
after one warm-up of each (the warm-up also fills ``check_model``'s cache); the bar (issue 28):
the check costs less than one training step.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from energon_pack.attention import check_first_batch  # noqa: E402
from energon_pack.samples import EncodedSample, collate_packs, pack_documents  # noqa: E402

VOCAB, ROWS, REPEATS = 32000, 2, 3
PACK_SIZES = (1024, 2048)


def make_model() -> transformers.LlamaForCausalLM:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa").train()


def make_batch(pack_size: int, seed: int = 0):
    """``ROWS`` packs of random documents (32..pack_size/3 tokens), filled until the next
    document does not fit (the rest is tail padding)."""
    gen = torch.Generator().manual_seed(seed)
    packs = []
    for r in range(ROWS):
        docs, used = [], 0
        while True:
            n = int(torch.randint(32, pack_size // 3, (1,), generator=gen))
            if used + n > pack_size:
                break
            tokens = torch.randint(3, VOCAB, (n,), generator=gen)
            mask = torch.ones(n, dtype=torch.bool)
            docs.append(EncodedSample(__key__=f"r{r}d{len(docs)}", __restore_key__=(),
                                      tokens=tokens, loss_mask=mask))  # fmt: skip
            used += n
        packs.append(pack_documents(docs))
    return collate_packs(packs, pad_to=pack_size)


def _median_seconds(fn, repeats: int = REPEATS) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch) -> None:
        loss = model(**batch.hf_kwargs("sdpa", config=model)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads, CPU float32")  # fmt: skip
    print("| pack | rows | documents | checked | train step (s) | check (s) | check / step |")
    print("|---|---|---|---|---|---|---|")
    for pack_size in PACK_SIZES:
        batch = make_batch(pack_size)
        train = _median_seconds(lambda b=batch: step(b))
        report = check_first_batch(model, batch)
        check = _median_seconds(lambda b=batch: check_first_batch(model, b))
        documents = len(batch.metadata.cu_seqlens) - 1
        print(f"| {pack_size} | {ROWS} | {documents} | {len(report.documents)} | {train:.3f} | "
              f"{check:.3f} | {check / train:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
