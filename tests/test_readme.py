# SPDX-License-Identifier: Apache-2.0
"""The README's Python snippet runs as written (paths and the model swapped for tiny local ones)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README.md has no ```python block"
    return blocks[0]


def test_readme_snippet_trains_on_packed_batches(tmp_path: Path, tokenizer_dir: Path) -> None:
    from energon_pack.testing import synthetic_texts
    from energon_pack.tools import make_text_dataset, tiny_causal_lm

    data = make_text_dataset(tmp_path / "data", synthetic_texts(40, seed=1, max_words=30))
    code = _snippet()
    code = code.replace('"path/to/tokenizer"', repr(str(tokenizer_dir)))
    code = code.replace('"data/"', repr(str(data)))
    code = code.replace("pack_size=4096", "pack_size=64")
    code = code.replace("default_worker_config()", "default_worker_config(num_workers=0)")
    assert code != _snippet()
    # the loop runs forever on training data (repeat=True): stop it after three batches
    code = code.replace(
        "for batch in get_savable_loader(ds):",
        "for step, batch in zip(range(3), get_savable_loader(ds)):",
    )
    model = tiny_causal_lm(vocab_size=256, seed=0)
    scope: dict = {"model": model}
    exec(compile(code, str(README), "exec"), scope)
    out = scope["out"]
    assert scope["step"] == 2
    assert torch.isfinite(out.loss)
    assert out.logits.shape[:2] == scope["batch"].tokens.shape
