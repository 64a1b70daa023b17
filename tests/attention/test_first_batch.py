# SPDX-License-Identifier: Apache-2.0
"""check_first_batch: the real packed batch through the real model vs each document alone.

Tiny Llama / Mistral models built from configs (random weights), batches from the real packer
(``model_families.packed_batch``: rows of documents 20 + 12 and 7 + 3 plus tail padding).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import transformers
from model_families import VOCAB, CumsumLlama, packed_batch

from energon_pack.attention import FirstBatchReport, PackingNotExactError, check_first_batch

SIZES = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)


def _model(cls: type = transformers.LlamaForCausalLM, seed: int = 0, **config: Any) -> Any:
    config_class = transformers.MistralConfig if "Mistral" in cls.__name__ else None
    config_class = config_class or transformers.LlamaConfig
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return cls(config_class(**{**SIZES, **config})).eval()


class BatchNormLlama(transformers.LlamaForCausalLM):
    """Train-mode batch statistics over every position of the batch (padding included)."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.norm = torch.nn.BatchNorm1d(config.hidden_size)

    def forward(self, input_ids=None, **kwargs):
        embeds = self.model.embed_tokens(input_ids)
        embeds = self.norm(embeds.transpose(1, 2)).transpose(1, 2)
        return super().forward(inputs_embeds=embeds, **kwargs)


@pytest.fixture(scope="module")
def batch() -> Any:
    return packed_batch()[0]


def test_an_exact_model_passes_with_every_document_compared(batch: Any) -> None:
    report = check_first_batch(_model(), batch, "sdpa")
    assert isinstance(report, FirstBatchReport)
    # latest offsets first; r1d1 would make the padded batch 2 x 12 > 68 / 4 tokens
    assert report.documents == ("r0d1",)
    assert 1e-5 <= report.tolerance <= 1e-3  # float32 floor x max(1, largest |logit|)
    assert report.max_difference <= report.tolerance
    assert report.loss_difference is not None and report.loss_difference <= 2 * report.tolerance
    assert 0.0 <= report.noise < report.tolerance and report.seconds > 0
    # a larger budget: every document, the latest offsets of each row first
    report = check_first_batch(_model(), batch, max_tokens=80)
    assert report.documents == ("r0d1", "r1d1", "r0d0", "r1d0")
    assert check_first_batch(_model(), batch, max_tokens=80, max_documents=2).documents == (
        "r0d1",
        "r1d1",
    )


def test_a_base_model_is_compared_on_its_hidden_states(batch: Any) -> None:
    model = _model(transformers.LlamaModel)
    # config=None: check_model refuses base models today (issue 28, item 1)
    report = check_first_batch(model, batch, "eager", config=None)
    assert report.loss_difference is None and report.max_difference <= report.tolerance


def test_a_mechanism_that_sees_the_whole_row_fails_naming_the_document(batch: Any) -> None:
    # config=None: hf_kwargs does not check the model (check_model would refuse the class)
    with pytest.raises(PackingNotExactError, match=r"CumsumLlama with sdpa \(first-batch") as err:
        check_first_batch(_model(CumsumLlama), batch, "sdpa", config=None)
    message = str(err.value)
    assert "document 'r0d1' (row 0, tokens 20..31) differs" in message
    assert "tolerance 1e-05" in message and "What to do: pass config=model" in message


def test_a_sliding_window_packed_without_config_fails_and_with_it_passes(batch: Any) -> None:
    model = _model(transformers.MistralForCausalLM, sliding_window=8)
    with pytest.raises(PackingNotExactError, match=r"document 'r0d1'.*differs.*by 0\.\d"):
        check_first_batch(model, batch, "sdpa", config=None)
    assert check_first_batch(model, batch, "sdpa").max_difference <= 1e-5


def test_bf16_passes_with_its_own_tolerance(batch: Any) -> None:
    model = _model().to(torch.bfloat16)
    report = check_first_batch(model, batch, "sdpa")
    assert report.tolerance >= 3e-2 and report.max_difference <= report.tolerance
    assert report.max_difference > 1e-5  # bf16 rounding: the float32 floor would refuse it
    with pytest.raises(PackingNotExactError, match="more than the tolerance 1e-05 \\(given\\)"):
        check_first_batch(model, batch, "sdpa", tolerance=1e-5)


def test_train_mode_with_dropout_passes_and_is_restored(batch: Any) -> None:
    model = _model(attention_dropout=0.5)
    model.lm_head = torch.nn.Sequential(torch.nn.Dropout(0.3), model.lm_head)
    model.train()
    rng = torch.get_rng_state()
    report = check_first_batch(model, batch, "sdpa")
    assert report.max_difference <= report.tolerance
    assert model.training and all(m.training for m in model.modules())
    assert model.model.layers[0].self_attn.attention_dropout == 0.5
    assert model.lm_head[0].p == 0.3
    assert torch.equal(torch.get_rng_state(), rng)  # training's random stream is untouched
    # dropout really is on outside the check: two forward passes differ
    ids = batch.tokens[:1]
    assert not torch.equal(model(input_ids=ids).logits, model(input_ids=ids).logits)


def test_batch_statistics_fail_and_the_running_statistics_are_restored(batch: Any) -> None:
    model = _model(BatchNormLlama).train()
    before = model.norm.running_mean.clone()
    with pytest.raises(PackingNotExactError, match=r"BatchNormLlama.*padded-batch noise"):
        check_first_batch(model, batch, "sdpa", config=None)
    assert torch.equal(model.norm.running_mean, before)
    assert int(model.norm.num_batches_tracked) == 0


def test_a_batch_with_token_type_ids_is_refused_as_not_text(batch: Any) -> None:
    typed = dataclasses.replace(batch, token_type_ids=torch.zeros_like(batch.tokens))
    with pytest.raises(ValueError, match="covers text batches.*token_type_ids"):
        check_first_batch(_model(), typed, "sdpa", config=None)


def test_packed_trainer_checks_the_first_batch_before_the_first_step(
    batch: Any, tmp_path: Any
) -> None:
    pytest.importorskip("accelerate")
    from energon_pack.training import PackedTrainer

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    # model.config is a LlamaConfig, so hf_kwargs accepts it: only the real model shows it
    model = _model(CumsumLlama)
    trainer = PackedTrainer(model=model, args=args, loader=[batch, batch])
    with pytest.raises(PackingNotExactError, match="CumsumLlama.*document 'r0d1'"):
        trainer.train()
    assert trainer.state.global_step == 0
    off = PackedTrainer(model=model, args=args, loader=[batch], check_first_batch=False)
    # without it, hf_kwargs(config=model) still measures this small user class on the instance
    with pytest.raises(PackingNotExactError, match="CumsumLlama with sdpa.*not transformers'"):
        off.train()
    exact = PackedTrainer(model=_model(attention_dropout=0.1), args=args, loader=[batch])
    assert exact.train().global_step == 1
    assert exact.model.model.layers[0].self_attn.attention_dropout == 0.1
