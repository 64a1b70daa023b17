# SPDX-License-Identifier: Apache-2.0
"""One object per attention implementation: its mask form, support flag and unknown names."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch.nn.attention.flex_attention import BlockMask

from energon_pack.attention import LocalAttention, document_metadata
from energon_pack.attention._implementations import IMPLEMENTATIONS, implementation


def test_each_implementation_gets_its_mask_form() -> None:
    meta = document_metadata([[3, 2]], length=6)
    local = LocalAttention()
    sdpa = implementation("sdpa").attention_mask(meta.seq_idx, local)
    eager = implementation("eager").attention_mask(meta.seq_idx, local, mask_dtype=torch.float16)
    flex = implementation("flex_attention").attention_mask(meta.seq_idx, local)
    # slots [3, 2 + 1 pad]: the second slot's pad attends within its slot
    expected = torch.tensor(
        [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0],
         [0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1]], dtype=torch.bool,
    )  # fmt: skip
    assert sdpa.dtype == torch.bool and torch.equal(sdpa[0, 0], expected)
    assert eager.dtype == torch.float16
    assert torch.equal(eager[0, 0] == 0, expected)
    assert (eager[0, 0][~expected] == torch.finfo(torch.float16).min).all()  # as transformers
    assert isinstance(flex, BlockMask)
    for name in ("flash_attention_2", "flash_attention_3"):
        impl = implementation(name)
        assert impl.varlen and impl.attention_mask(meta.seq_idx, local) is None
    assert [n for n, i in IMPLEMENTATIONS.items() if i.varlen] == [
        "flash_attention_2",
        "flash_attention_3",
    ]


def test_support_comes_from_the_model_class() -> None:
    # GPT-2 runs no FlexAttention in transformers; Llama runs all of them
    assert not implementation("flex_attention").supported_by(transformers.GPT2LMHeadModel)
    assert all(i.supported_by(transformers.LlamaForCausalLM) for i in IMPLEMENTATIONS.values())


def test_an_unknown_implementation_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown attn_implementation 'xformers'.*'sdpa'"):
        implementation("xformers")


def test_flex_cpu_route_never_compiles_in_either_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # transformers' singleton compiles again when a call's `training` differs from the one it
    # was made with: the route must run flex uncompiled in train mode too (it compiled through
    # inductor, which failed after an earlier compiled flex call in the same process)
    from torch.nn.attention.flex_attention import flex_attention
    from transformers.integrations import flex_attention as flex

    wrapper = flex.WrappedFlexAttention
    for name in ("_instance", "_is_flex_compiled", "_compiled_flex_attention"):
        monkeypatch.setattr(wrapper, name, getattr(wrapper, name))  # restored after the test
    compiled: list[object] = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiled.append(fn) or fn)
    monkeypatch.setattr(wrapper, "_instance", None)
    user = wrapper(False)  # a user's first flex call in eval mode: compiled once
    assert compiled == [flex_attention]
    with implementation("flex_attention").cpu_route():
        for training in (False, True, False):
            assert wrapper(training)() is flex_attention
    assert compiled == [flex_attention]  # nothing compiled inside the route
    assert wrapper._instance is user and wrapper(False)() is flex_attention  # the user's, back
