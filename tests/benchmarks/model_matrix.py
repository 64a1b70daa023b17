# SPDX-License-Identifier: Apache-2.0
"""Print the model-family matrix of packing exactness as a markdown table.

Run: ``python tests/benchmarks/model_matrix.py``. Each row is a tiny random model from a
transformers config (``tests/attention/model_families.py``), each column a CPU attention
implementation; a packed batch (documents of 20 and 12 tokens, windows / chunks of 8) runs
through ``batch.hf_kwargs(impl, config=model.config)`` and every document is compared with
itself run alone. A cell is ``exact (max |logit diff|)``, ``raises: <feature>``
(``PackingNotExactError``), or ``n/a`` (transformers refuses that implementation on CPU).
FlexAttention runs uncompiled (same math; compiling per model is slow on CPU).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "attention"))

from model_families import FAMILIES, IMPLEMENTATIONS, build_model, max_difference, packed_batch  # noqa: E402  # noqa: E402
from torch.nn.attention.flex_attention import flex_attention  # noqa: E402
from transformers.integrations import flex_attention as hf_flex  # noqa: E402

from energon_pack.attention import PackingNotExactError  # noqa: E402


def _cell(family, impl: str) -> str:
    if not family.supports(impl):
        return "n/a"
    model = build_model(family, impl)
    batch, docs = packed_batch()
    try:
        logits, loss = max_difference(model, impl, batch, docs)
    except PackingNotExactError as err:
        return f"raises: {err.feature}"
    word = "exact" if max(logits, loss) <= 1e-5 else "DIFFERS"
    return f"{word} ({logits:.0e})"


def main() -> None:
    warnings.filterwarnings("ignore")
    wrapper = hf_flex.WrappedFlexAttention
    wrapper._is_flex_compiled = True
    wrapper._compiled_flex_attention = staticmethod(flex_attention)
    wrapper.training = False
    print("| model (tiny, 2 layers) | " + " | ".join(IMPLEMENTATIONS) + " |")
    print("|---|" + "---|" * len(IMPLEMENTATIONS))
    for family in FAMILIES:
        cells = [_cell(family, impl) for impl in IMPLEMENTATIONS]
        print(f"| {family.name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
