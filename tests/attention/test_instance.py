# SPDX-License-Identifier: Apache-2.0
"""check_model judges the instance the user passes: its loaded implementation, its PEFT
adapters, code that is not transformers' own, and MoE router losses (energon_pack/attention/
_instance.py, _foreign.py). Real tiny transformers models, real packed batches."""

from __future__ import annotations

import itertools

import accelerate.hooks
import peft
import pytest
import torch
import transformers
from model_families import CLASS_VERDICT, VOCAB, max_difference, packed_batch

from energon_pack.attention import (
    PackingNotExactError,
    _instance,
    check_first_batch,
    check_model,
)
from energon_pack.attention._verify import cpu_route

IMPLS = ("sdpa", "eager", "flex_attention", "flash_attention_2")
LLAMA = transformers.LlamaForCausalLM


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def llama(impl: str = "sdpa", seed: int = 0, cls: type = LLAMA) -> torch.nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    torch.manual_seed(seed)
    with cpu_route(impl, cls):
        return cls._from_config(config, attn_implementation=impl, dtype=torch.float32).eval()


# -- 1. the implementation the model was loaded with --------------------------------------------


@pytest.mark.parametrize("loaded", IMPLS)
def test_the_loaded_implementation_is_used_and_another_refused(loaded: str) -> None:
    model = llama(loaded)
    with cpu_route(loaded, LLAMA):
        # no implementation asked: the kwargs are built for the loaded one, and are exact
        logits, loss = max_difference(model, None, *packed_batch())
        assert logits <= 1e-5 and loss <= 1e-5
        for requested in set(IMPLS) - {loaded}:
            with pytest.raises(
                PackingNotExactError, match=rf"'{requested}'.*loaded with '{loaded}'"
            ):
                check_model(model, requested)
            with pytest.raises(PackingNotExactError, match=rf"hf_kwargs\('{loaded}', config=model"):
                packed_batch()[0].hf_kwargs(requested, config=model)


def test_what_the_mismatch_check_prevents() -> None:
    # loaded eager, given sdpa's bool mask unchecked: eager adds it as 1/0, documents mix
    model = llama("eager")
    batch, docs = packed_batch()
    unchecked = model(**batch.hf_kwargs("sdpa", config=None)).logits
    exact = model(**batch.hf_kwargs(config=model)).logits
    assert (unchecked - exact).abs().max() > 1e-2


def test_a_vlm_is_judged_by_its_text_decoder_implementation() -> None:
    config = transformers.LlavaConfig()
    config.text_config._attn_implementation = "eager"
    with pytest.raises(PackingNotExactError, match=r"'sdpa' on a model loaded with 'eager'"):
        check_model(config, "sdpa")


# -- 2. PEFT ---------------------------------------------------------------------------------------


def test_lora_through_the_readme_call_is_exact() -> None:
    lora = peft.LoraConfig(target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
    model = peft.get_peft_model(llama(), lora)
    b = model.base_model.model.model.layers[0].self_attn.q_proj.lora_B["default"].weight
    assert b.abs().sum() > 0  # the adapter changes the output
    assert check_model(model, "sdpa").verified_by.startswith(CLASS_VERDICT)
    logits, loss = max_difference(model, "sdpa", *packed_batch())
    assert logits <= 1e-5 and loss <= 1e-5


@pytest.mark.parametrize(
    ("peft_config", "name"),
    [
        (peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4), "PROMPT_TUNING"),
        (peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4), "PREFIX_TUNING"),
        (
            peft.PromptEncoderConfig(
                task_type="CAUSAL_LM", num_virtual_tokens=4, encoder_hidden_size=16
            ),
            "P_TUNING",
        ),
    ],
)
def test_prompt_learning_is_refused_by_name(peft_config, name: str) -> None:
    model = peft.get_peft_model(llama(), peft_config)
    with pytest.raises(PackingNotExactError, match=rf"PEFT {name}: it prepends 4 virtual tokens"):
        packed_batch()[0].hf_kwargs("sdpa", config=model)


# -- 3. code the class name does not show -------------------------------------------------------


def _ignores_the_mask(self, hidden_states, position_embeddings, attention_mask=None, **kwargs):
    """A "fast attention" patch in the common style: causal, blind to the documents."""
    return _ORIGINAL_ATTENTION(self, hidden_states, position_embeddings, None, **kwargs)


def _passes_through(self, *args, **kwargs):
    return _ORIGINAL_ATTENTION(self, *args, **kwargs)


_ORIGINAL_ATTENTION = transformers.models.llama.modeling_llama.LlamaAttention.forward


@pytest.fixture
def patch_attention():
    attention = transformers.models.llama.modeling_llama.LlamaAttention
    try:
        yield lambda forward: setattr(attention, "forward", forward)
    finally:
        attention.forward = _ORIGINAL_ATTENTION


def test_a_patched_class_forward_is_measured_on_the_instance(patch_attention) -> None:
    model = llama()
    patch_attention(_passes_through)  # a patch that changes nothing: measured, accepted
    report = check_model(model, "sdpa")
    assert report.verified_by.startswith("the instance itself")
    patch_attention(_ignores_the_mask)
    with pytest.raises(PackingNotExactError, match=r"LlamaAttention.forward replaced by .*"
                       r"_ignores_the_mask.*max output difference"):  # fmt: skip
        check_model(model, "sdpa")
    assert model.training is False  # measured in eval mode, its mode restored
    model.train()
    with pytest.raises(PackingNotExactError):  # another call: measured again, mode restored
        check_model(model, "sdpa", pack_size=64)
    assert model.training is True
    patch_attention(_ORIGINAL_ATTENTION)
    assert check_model(model, "sdpa").verified_by.startswith(CLASS_VERDICT)


def test_a_large_patched_model_is_left_to_the_first_batch_check(
    patch_attention, monkeypatch
) -> None:
    monkeypatch.setattr(_instance, "PARAMETER_CAP", 1000)  # a large model: not measured here
    batch, _ = packed_batch()
    for patch, exact in ((_passes_through, True), (_ignores_the_mask, False)):
        model = llama()
        patch_attention(patch)
        with pytest.raises(PackingNotExactError, match=rf"{patch.__name__}.*too large.*"
                           r"check_first_batch\(model, batch, config=model.config\)"):  # fmt: skip
            batch.hf_kwargs("sdpa", config=model)
        if not exact:  # the first-batch check on the real model finds what the patch does
            with pytest.raises(PackingNotExactError, match=r"first-batch check.*differs"):
                check_first_batch(model, batch, "sdpa", config=model.config)
            continue
        check_first_batch(model, batch, "sdpa", config=model.config)
        report = check_model(model, "sdpa")
        assert report.verified_by == "first-batch check on this instance"
        patch_attention(_ignores_the_mask)  # other code than the one checked: refused again
        with pytest.raises(PackingNotExactError, match=r"_ignores_the_mask.*too large"):
            check_model(model, "sdpa")


class BatchNTKRotary(transformers.models.llama.modeling_llama.LlamaRotaryEmbedding):
    """A hand-written dynamic NTK: positions scaled by the largest one in the batch."""

    def forward(self, x, position_ids):
        return super().forward(x, position_ids / (1 + position_ids.max() / 16))


def test_a_module_swapped_on_an_instance_is_measured_and_refused() -> None:
    model = llama()
    model.model.rotary_emb = BatchNTKRotary(model.config)
    with pytest.raises(
        PackingNotExactError, match=r"class .*BatchNTKRotary.*model.rotary_emb.*max output"
    ):
        check_model(model, "sdpa")
    untouched = llama()
    assert check_model(untouched, "sdpa").verified_by.startswith(CLASS_VERDICT)
    mlp = untouched.model.layers[1].mlp
    original = mlp.forward
    mlp.forward = lambda x: original(x) + x.roll(1, dims=1)  # mixes neighbouring tokens
    with pytest.raises(PackingNotExactError, match=r"forward set on the instance model.layers.1"):
        check_model(untouched, "sdpa")


class ShortConvLlama(transformers.LlamaForCausalLM):
    """A user's subclass: a causal depthwise convolution over the row mixes the tokens."""

    def __init__(self, config):
        super().__init__(config)
        width = config.hidden_size
        self.conv = torch.nn.Conv1d(width, width, 4, groups=width, padding=3)

    def forward(self, input_ids=None, **kwargs):
        embeds = self.model.embed_tokens(input_ids)
        mixed = self.conv(embeds.transpose(1, 2))[..., : embeds.shape[1]].transpose(1, 2)
        return super().forward(inputs_embeds=embeds + mixed, **kwargs)


def test_a_subclass_that_mixes_tokens_is_refused_for_its_mechanism() -> None:
    model = llama(cls=ShortConvLlama)
    with pytest.raises(PackingNotExactError, match=r"ShortConvLlama with sdpa.*max output") as err:
        packed_batch()[0].hf_kwargs("sdpa", config=model)
    assert "position_ids" not in str(err.value)  # its forward passes them on (**kwargs)
    # a config alone verifies the transformers class it maps to, not the user's subclass
    assert check_model(model.config, "sdpa").verified_by.startswith(CLASS_VERDICT)


def test_standard_wrappers_and_modes_are_not_foreign() -> None:
    model = llama()
    model.gradient_checkpointing_enable()
    model.model.layers[0].compile()
    lora = peft.LoraConfig(target_modules=["q_proj", "lm_head"], use_dora=True)
    for candidate in (model, peft.get_peft_model(llama(), lora)):
        assert check_model(candidate, "sdpa").verified_by.startswith(CLASS_VERDICT)


class ScaleHook(accelerate.hooks.ModelHook):
    """A user's accelerate hook: it changes the module's output, token by token."""

    def post_forward(self, module, output):
        return output * 2


class MixHook(accelerate.hooks.ModelHook):
    """A user's accelerate hook that mixes neighbouring tokens."""

    def post_forward(self, module, output):
        return output + output.roll(1, dims=1)


def test_accelerate_device_hooks_pass_and_other_hooks_are_named() -> None:
    model = llama()
    hook = accelerate.hooks.AlignDevicesHook(execution_device="cpu", io_same_device=True)
    accelerate.hooks.add_hook_to_module(model.model.layers[0], hook)
    assert check_model(model, "sdpa").verified_by.startswith(CLASS_VERDICT)
    accelerate.hooks.add_hook_to_module(model.model.layers[1].mlp, ScaleHook())
    assert check_model(model, "sdpa").verified_by.startswith("the instance itself")
    accelerate.hooks.add_hook_to_module(model.model.layers[1].mlp, MixHook())
    with pytest.raises(PackingNotExactError, match=r"forward set on the instance model.layers.1"):
        check_model(model, "sdpa")


# -- 4. MoE router losses -----------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["sdpa", "flash_attention_2"])
def test_moe_router_loss_is_refused_by_name(impl: str) -> None:
    config = transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2, output_router_logits=True,
    )  # fmt: skip
    with cpu_route(impl, transformers.MixtralForCausalLM):
        # the base model returns the router logits and computes no loss from them
        base = transformers.MixtralModel._from_config(config, attn_implementation=impl)
        # (check_instance: the family verdict on a base model is the experiment's business)
        assert _instance.check_instance(base, impl, None) == (base, impl, None)
        model = transformers.MixtralForCausalLM._from_config(config, attn_implementation=impl)
        with pytest.raises(PackingNotExactError, match=r"MoE router load-balancing loss.*"
                           r"2-D padding mask.*output_router_logits=False"):  # fmt: skip
            packed_batch()[0].hf_kwargs(impl, config=model)
        model.config.output_router_logits = False
        logits, loss = max_difference(model.eval(), impl, *packed_batch())
    assert logits <= 1e-5 and loss <= 1e-5


def test_every_pair_of_implementations_is_named() -> None:
    for loaded, requested in itertools.permutations(IMPLS, 2):
        config = transformers.LlamaConfig()
        config._attn_implementation = loaded
        with pytest.raises(PackingNotExactError, match=rf"'{requested}' on .* '{loaded}'"):
            check_model(config, requested)
