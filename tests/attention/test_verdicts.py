# SPDX-License-Identifier: Apache-2.0
"""Verdicts tied to versions, cached on disk, and an experiment at the user's scale.

The family matrix (``verified.json``) is read only on the transformers and torch versions it
was proven on; elsewhere the experiment decides and its outcome is cached per version. The
experiment keeps every layer, runs rows as long as the pack (capped), in eval and train mode,
and compares base models (VLM text decoders) on hidden states at their real vocabulary.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from energon_pack.attention import (
    PackingNotExactError,
    _experiment,
    _verdicts,
    _verify,
    check_model,
)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty verdict cache and no verdicts in memory."""
    monkeypatch.setenv("ENERGON_PACK_CACHE", str(tmp_path))
    _verify._VERDICTS.clear()
    yield tmp_path
    _verify._VERDICTS.clear()


def test_the_table_is_read_only_on_its_own_versions(fresh, monkeypatch) -> None:
    made = _verdicts.table_versions()
    assert set(made) == {"transformers", "torch"}
    if made == _verdicts.installed():
        assert check_model(transformers.LlamaConfig(), "sdpa").verified_by.startswith(
            f"family matrix (transformers {made['transformers']}"
        )
        _verify._VERDICTS.clear()
    # a transformers release the matrix was not proven on: the experiment answers
    monkeypatch.setattr(_verdicts, "installed", lambda: {**made, "transformers": "99.0.0"})
    assert _verdicts.table() == {}
    report = check_model(transformers.LlamaConfig(), "sdpa")
    assert report.verified_by.startswith("tiny copy")
    assert [p.name for p in fresh.iterdir()] == [
        f"verdicts-transformers99.0.0-torch{made['torch']}.json"
    ]


def test_an_experiment_runs_once_per_version(fresh, monkeypatch) -> None:
    config = transformers.MistralConfig(attention_bias=True)  # not a matrix cell
    first = check_model(config, "eager", pack_size=8192)
    assert first.verified_by.startswith("tiny copy")
    (cache,) = fresh.iterdir()
    assert len(json.loads(cache.read_text())) == 1

    def never(*args, **kwargs):
        raise AssertionError("the experiment ran again")

    _verify._VERDICTS.clear()  # a new process: only the disk remembers
    monkeypatch.setattr(_verify, "experiment", never)
    assert check_model(config, "eager", pack_size=8192) == first
    # another pack size is another experiment (its rows and rope limits differ)
    with pytest.raises(AssertionError, match="ran again"):
        check_model(config, "eager", pack_size=64)


def test_refusals_are_cached_with_their_reason(fresh) -> None:
    config = transformers.MixtralConfig(output_router_logits=True)
    with pytest.raises(PackingNotExactError) as first:
        check_model(config, "sdpa", pack_size=128)
    _verify._VERDICTS.clear()
    with pytest.raises(PackingNotExactError) as again:
        check_model(config, "sdpa", pack_size=128)
    assert str(again.value) == str(first.value)
    assert "could not verify" not in str(first.value)


def test_rows_are_as_long_as_the_pack_with_late_documents() -> None:
    assert _experiment.experiment_rows(34) == [[21, 8, 5], [11, 7, 3]]
    assert _experiment.experiment_rows(4096) == [[187, 64, 5], [85, 7, 3]]  # capped at 256
    assert _experiment.experiment_rows(None) == [[91, 32, 5], [42, 7, 3]]


def test_the_copy_keeps_every_layer() -> None:
    config = transformers.Qwen2Config(
        num_hidden_layers=12, use_sliding_window=True, sliding_window=1024, max_window_layers=10
    )  # sliding layers only from index 10: a two-layer prefix never sees them
    tiny = _experiment.tiny_config(config, pack_size=4096)
    assert tiny.num_hidden_layers == 12 and tiny.layer_types == config.layer_types
    assert tiny.hidden_size == 64 and tiny.sliding_window == 8
    assert _experiment.tiny_config(config, all_layers=False).num_hidden_layers == 11


def test_the_copy_caps_sizes_given_per_layer() -> None:
    """Gemma 3n's MLP widths are a per-layer list (16384 each): capped like a single size."""
    config = transformers.Gemma3nTextConfig()
    tiny = _experiment.tiny_config(config, pack_size=4096)
    assert config.intermediate_size[0] == 16384
    assert tiny.intermediate_size == [128] * tiny.num_hidden_layers


def _qwen2_vl_7b_text() -> dict:
    """The released Qwen2-VL / Qwen2.5-VL 7B text config (a fresh dict per use)."""
    return dict(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    )  # fmt: skip


_REAL_VLMS = {
    # text configs shaped as the released checkpoints (vocabulary, widths, mRoPE sections)
    "qwen2-vl-7b": lambda: transformers.Qwen2VLConfig(text_config=_qwen2_vl_7b_text()),
    "qwen2.5-vl-7b": lambda: transformers.Qwen2_5_VLConfig(text_config=_qwen2_vl_7b_text()),
    "qwen3-vl-8b": lambda: transformers.Qwen3VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=4096, num_hidden_layers=36,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    ),
    "glm-4v": lambda: transformers.Glm4vConfig(),
}  # fmt: skip


@pytest.mark.parametrize("name", list(_REAL_VLMS))
def test_flagship_vlms_at_real_shapes_are_verified(fresh, name: str) -> None:
    # their text decoders are base models (no LM head): compared on hidden states, never a
    # loss of hidden states against token ids (which failed for any real vocabulary)
    config = _REAL_VLMS[name]()
    assert config.get_text_config(decoder=True).vocab_size > 150_000
    report = check_model(config, "sdpa", pack_size=4096)
    assert report.verified_by.startswith("tiny copy"), report.verified_by


class TrainOnlyMixing(transformers.LlamaForCausalLM):
    """Exact in eval mode; in train mode each position also sees the mean of its row (as a
    batch statistic or a capacity computed over the batch's tokens would)."""

    def forward(self, input_ids=None, position_ids=None, inputs_embeds=None, **kwargs):
        embeds = self.model.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        if self.training:
            embeds = embeds + embeds.mean(dim=1, keepdim=True)
        return super().forward(inputs_embeds=embeds, position_ids=position_ids, **kwargs)


def test_a_mechanism_of_train_mode_is_refused_naming_it(fresh) -> None:
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, vocab_size=300)
    model = TrainOnlyMixing(config).eval()
    with pytest.raises(PackingNotExactError, match="TrainOnlyMixing with sdpa.*in train mode"):
        check_model(model, "sdpa", pack_size=64)
    assert not model.training  # the user's model is never touched: the copy is

    with torch.no_grad():  # and it is right: eval mode alone would have accepted it
        assert (
            _experiment.experiment(
                _experiment.tiny_config(config, 64), transformers.LlamaForCausalLM, "sdpa", 64
            )[0]
            <= _verify.TOLERANCE
        )


def test_an_unbuildable_copy_answers_instead_of_crashing(fresh) -> None:
    # Dory's strict config rejects layouts its validator does not know: named, not a traceback
    if not hasattr(transformers, "DoryConfig"):
        pytest.skip(f"Dory is not in transformers {transformers.__version__} (new in 5.24)")
    try:
        report = check_model(transformers.DoryConfig(), "sdpa", pack_size=256)
    except PackingNotExactError as err:
        assert "Dory" in str(err) and "What to do" in str(err)
    else:
        assert report.verified_by.startswith("tiny copy")
