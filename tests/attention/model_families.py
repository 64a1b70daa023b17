# SPDX-License-Identifier: Apache-2.0
"""The model-family matrix: tiny random models of every family a user would pack, each cell
exact or refused.

Shared by ``test_model_families.py`` and ``tests/benchmarks/model_matrix.py``. A family is a
transformers config with the features under test (windows, rope types, flags); the package's
own ``tiny_config`` (the shrinking ``check_model``'s experiment uses) makes it small: 2-6
layers of width 64, windows and chunks of 8. A cell asks ``check_model`` (with the registry
of verified cells switched off, so the verdict is the experiment's or a refusal), and where it
accepts, runs a packed batch (documents of 20 and 12 tokens in one row, 7 and 3 plus tail
padding in another) through ``batch.hf_kwargs(impl, config=model)`` and compares every
document's logits and the token-weighted loss with the document run alone. Outcomes:
``exact`` (both within 1e-5), ``raises`` (:class:`PackingNotExactError`, with its feature),
``differs`` (accepted but wrong: a bug), ``n/a`` (transformers does not run ``impl`` for it on
CPU). Flash is transformers' flash route with the PyTorch reference kernel.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from energon_pack.attention import PackingNotExactError, _verify, check_model  # noqa: E402
from energon_pack.attention._implementations import implementation  # noqa: E402
from energon_pack.samples import EncodedSample, collate_packs, pack_documents  # noqa: E402

VOCAB = 97
WINDOW = 8
ROWS = [[20, 12], [7, 3]]  # documents longer than the window; the second row has tail padding
PACK_SIZE = 34
IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention", "flash_attention_2")
#: How check_model says it accepted a model on its class's verdict (the matrix on the versions
#: it was proven on, the experiment elsewhere), not on a measurement of the instance.
CLASS_VERDICT = ("family matrix", "tiny copy")
#: Explicit tiny sizes, for tests that spell out configs (test_bidirectional.py).
_SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
_MIXED = {"layer_types": ["sliding_attention", "full_attention"], "num_hidden_layers": 2}


@dataclass(frozen=True)
class Family:
    """One row of the matrix: a name, the model class and its config (class and features)."""

    #: Row label, e.g. ``"mistral (window 8)"``.
    name: str
    #: transformers class name of the model (a causal LM where the family has one).
    model_class: str
    #: transformers config class name.
    config_class: str
    #: The config's features under test (sizes come from ``tiny_config``).
    features: dict[str, Any] = field(default_factory=dict)
    #: A multimodal config: checked without building the (not shrunk) model.
    composite: bool = False

    def config(self) -> Any:
        """The tiny config (composite configs: as constructed)."""
        config = self.raw_config()
        return config if self.composite else _verify.tiny_config(config, all_layers=False)

    def raw_config(self) -> Any:
        """The config as constructed (transformers' default sizes)."""
        return getattr(transformers, self.config_class)(**self.features)

    def supports(self, impl: str) -> bool:
        """Whether transformers lets this model run with ``impl`` (flash: on a GPU)."""
        return implementation(impl).supported_by(getattr(transformers, self.model_class))


def F(name: str, model_class: str, config_class: str, **features: Any) -> Family:  # noqa: N802
    return Family(name, model_class, config_class, features)


def _rope(rope_type: str, **params: Any) -> dict[str, Any]:
    return {"rope_parameters": {"rope_type": rope_type, "rope_theta": 10000.0, **params}}


_LONGROPE = _rope(
    "longrope", short_factor=[1.0] * 48, long_factor=[2.0] * 48, original_max_position_embeddings=16
)
_LLAMA3 = _rope(
    "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
    original_max_position_embeddings=16,
)  # fmt: skip
_QWEN_WINDOW = {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1}
_VLM = {"composite": True}
#: Qwen3.5-VL built small (its nested configs are not shrunk): a gated delta-net layer, then
#: full attention; the matrix runs text rows through it (images: test_hybrid_vlm_proof.py).
_QWEN3_5_TEXT = dict(
    _SMALL, head_dim=8, layer_types=["linear_attention", "full_attention"],
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
    linear_value_head_dim=8,
)  # fmt: skip
_SMALL_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                     out_hidden_size=32, num_position_embeddings=64)  # fmt: skip
_DECODER = {"is_decoder": True, "is_encoder_decoder": False}  # as XForCausalLM sets it

FAMILIES = [
    F("llama", "LlamaForCausalLM", "LlamaConfig"),
    F("llama (llama3 rope)", "LlamaForCausalLM", "LlamaConfig", **_LLAMA3),
    F("llama (yarn rope)", "LlamaForCausalLM", "LlamaConfig", **_rope("yarn", factor=4.0)),
    F("llama (linear rope)", "LlamaForCausalLM", "LlamaConfig", **_rope("linear", factor=2.0)),
    F("llama (dynamic NTK rope)", "LlamaForCausalLM", "LlamaConfig",
      max_position_embeddings=16, **_rope("dynamic", factor=2.0)),
    F("mistral (window 8)", "MistralForCausalLM", "MistralConfig", sliding_window=WINDOW),
    F("ministral (window 8)", "MinistralForCausalLM", "MinistralConfig",
      sliding_window=WINDOW, head_dim=128),
    F("ministral3", "Ministral3ForCausalLM", "Ministral3Config"),
    F("mixtral", "MixtralForCausalLM", "MixtralConfig"),
    F("qwen2", "Qwen2ForCausalLM", "Qwen2Config"),
    F("qwen2 (window 8 on layer 2)", "Qwen2ForCausalLM", "Qwen2Config", **_QWEN_WINDOW),
    F("qwen3", "Qwen3ForCausalLM", "Qwen3Config"),
    F("qwen3 (window 8 on layer 2)", "Qwen3ForCausalLM", "Qwen3Config", **_QWEN_WINDOW),
    F("qwen3-moe", "Qwen3MoeForCausalLM", "Qwen3MoeConfig"),
    F("gemma2 (window 8)", "Gemma2ForCausalLM", "Gemma2Config", **_MIXED),
    F("gemma3 text (window 8)", "Gemma3ForCausalLM", "Gemma3TextConfig", **_MIXED),
    F("gemma3n text", "Gemma3nForCausalLM", "Gemma3nTextConfig"),
    F("gemma4 text", "Gemma4ForCausalLM", "Gemma4TextConfig"),
    F("phi3", "Phi3ForCausalLM", "Phi3Config"),
    F("phi3 (window 8)", "Phi3ForCausalLM", "Phi3Config", sliding_window=WINDOW),
    F("phi3 (LongRoPE, original 16)", "Phi3ForCausalLM", "Phi3Config",
      max_position_embeddings=64, original_max_position_embeddings=16, **_LONGROPE),
    F("starcoder2 (window 8)", "Starcoder2ForCausalLM", "Starcoder2Config", sliding_window=WINDOW),
    F("cohere2 (window 8)", "Cohere2ForCausalLM", "Cohere2Config", **_MIXED),
    F("gpt-oss (window 8)", "GptOssForCausalLM", "GptOssConfig", **_MIXED),
    F("llama4 text (chunks of 8)", "Llama4ForCausalLM", "Llama4TextConfig",
      layer_types=["chunked_attention", "full_attention"], no_rope_layers=[1, 0],
      num_hidden_layers=2),
    F("deepseek-v3 (MLA, MoE)", "DeepseekV3ForCausalLM", "DeepseekV3Config",
      first_k_dense_replace=1),
    F("smollm3 (NoPE layers)", "SmolLM3ForCausalLM", "SmolLM3Config"),
    F("exaone4", "Exaone4ForCausalLM", "Exaone4Config"),
    F("olmo2", "Olmo2ForCausalLM", "Olmo2Config"),
    F("olmo3", "Olmo3ForCausalLM", "Olmo3Config"),
    F("glm4", "Glm4ForCausalLM", "Glm4Config"),
    F("granite", "GraniteForCausalLM", "GraniteConfig"),
    F("modernbert decoder", "ModernBertDecoderForCausalLM", "ModernBertDecoderConfig"),
    F("mllama text", "MllamaForCausalLM", "MllamaTextConfig"),
    F("bert decoder", "BertLMHeadModel", "BertConfig", is_decoder=True),
    F("whisper decoder", "WhisperForCausalLM", "WhisperConfig", is_encoder_decoder=False),
    F("gpt-neox", "GPTNeoXForCausalLM", "GPTNeoXConfig"),
    F("gpt2", "GPT2LMHeadModel", "GPT2Config"),
    F("gpt-bigcode", "GPTBigCodeForCausalLM", "GPTBigCodeConfig"),
    F("opt", "OPTForCausalLM", "OPTConfig"),
    F("biogpt", "BioGptForCausalLM", "BioGptConfig"),
    F("xglm", "XGLMForCausalLM", "XGLMConfig"),
    F("mpt", "MptForCausalLM", "MptConfig"),
    F("falcon (rotary)", "FalconForCausalLM", "FalconConfig"),
    F("gpt-j", "GPTJForCausalLM", "GPTJConfig"),
    F("gpt-neo", "GPTNeoForCausalLM", "GPTNeoConfig"),
    F("moshi (unused sliding_window)", "MoshiForCausalLM", "MoshiConfig"),
    # hybrids: exact through transformers' kernel route with reference kernels (Qwen3-Next,
    # Qwen3.5, OLMo-hybrid, LFM2, the Mamba2 hybrids) or refused by mechanism (Mamba v1,
    # MiniMax, RecurrentGemma)
    # refused: positions, recurrence, ALiBi, hybrids, encoder-decoders; bidirectional blocks
    # of VLMs (Gemma 3 images, PaliGemma's prefix) are proven in test_bidirectional.py
    F("bloom (ALiBi)", "BloomForCausalLM", "BloomConfig"),
    F("falcon (ALiBi)", "FalconForCausalLM", "FalconConfig", alibi=True),
    F("bamba (hybrid Mamba2)", "BambaForCausalLM", "BambaConfig",
      attn_layer_indices=[1], num_hidden_layers=2),
    F("lfm2 (hybrid short conv)", "Lfm2ForCausalLM", "Lfm2Config", full_attn_idxs=[1]),
    F("lfm2-moe", "Lfm2MoeForCausalLM", "Lfm2MoeConfig",
      layer_types=["conv", "full_attention"], num_hidden_layers=2),
    F("qwen3-next", "Qwen3NextForCausalLM", "Qwen3NextConfig"),
    F("qwen3.5 (text)", "Qwen3_5ForCausalLM", "Qwen3_5TextConfig"),
    F("qwen3.5-moe (text)", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig"),
    F("qwen3.5-vl (text rows)", "Qwen3_5ForConditionalGeneration", "Qwen3_5Config",
      text_config=_QWEN3_5_TEXT, vision_config=_SMALL_VISION),
    F("olmo-hybrid", "OlmoHybridForCausalLM", "OlmoHybridConfig"),
    F("jamba", "JambaForCausalLM", "JambaConfig"),
    F("falcon-h1", "FalconH1ForCausalLM", "FalconH1Config"),
    F("zamba2", "Zamba2ForCausalLM", "Zamba2Config",
      layers_block_type=["linear_attention", "hybrid"], num_hidden_layers=2),
    F("granitemoe-hybrid", "GraniteMoeHybridForCausalLM", "GraniteMoeHybridConfig",
      layer_types=["mamba", "attention"], num_hidden_layers=2),
    F("nemotron-h", "NemotronHForCausalLM", "NemotronHConfig"),
    F("minimax", "MiniMaxForCausalLM", "MiniMaxConfig"),
    F("recurrent-gemma", "RecurrentGemmaForCausalLM", "RecurrentGemmaConfig"),
    F("rwkv", "RwkvForCausalLM", "RwkvConfig"),
    F("xlstm", "xLSTMForCausalLM", "xLSTMConfig"),
    F("bart decoder", "BartForCausalLM", "BartConfig", **_DECODER),
    F("mbart decoder", "MBartForCausalLM", "MBartConfig", **_DECODER),
    F("marian decoder", "MarianForCausalLM", "MarianConfig", **_DECODER),
    F("pegasus decoder", "PegasusForCausalLM", "PegasusConfig", **_DECODER),
    F("blenderbot decoder", "BlenderbotForCausalLM", "BlenderbotConfig", **_DECODER),
    F("mvp decoder", "MvpForCausalLM", "MvpConfig", **_DECODER),
    F("trocr decoder", "TrOCRForCausalLM", "TrOCRConfig"),
    F("roberta decoder", "RobertaForCausalLM", "RobertaConfig", is_decoder=True),
    F("xlm-roberta decoder", "XLMRobertaForCausalLM", "XLMRobertaConfig", is_decoder=True),
    F("camembert decoder", "CamembertForCausalLM", "CamembertConfig", is_decoder=True),
    F("data2vec-text decoder", "Data2VecTextForCausalLM", "Data2VecTextConfig", is_decoder=True),
    F("bert (is_decoder=False)", "BertLMHeadModel", "BertConfig"),
    F("gemma3 text (bidirectional)", "Gemma3ForCausalLM", "Gemma3TextConfig",
      use_bidirectional_attention=True),
    Family("t5gemma (encoder-decoder)", "T5GemmaModel", "T5GemmaConfig", **_VLM),
    Family("blt", "BltForCausalLM", "BltConfig", **_VLM),  # composite: checked, never built
]  # fmt: skip


class CumsumLlama(transformers.LlamaForCausalLM):
    """A mechanism no list knows: each position also sees the running sum of the row."""

    def forward(self, input_ids=None, position_ids=None, attention_mask=None, **kwargs):
        embeds = self.model.embed_tokens(input_ids)
        embeds = embeds + embeds.cumsum(dim=1) / 8
        return super().forward(
            inputs_embeds=embeds, position_ids=position_ids, attention_mask=attention_mask, **kwargs
        )


@contextmanager
def route(family: Family, impl: str) -> Iterator[None]:
    """Flash on CPU through transformers' route and the reference kernel; else as is."""
    with _verify.cpu_route(impl, getattr(transformers, family.model_class)):
        yield


def build_model(family: Family, impl: str, seed: int = 0) -> torch.nn.Module:
    """The family's tiny float32 model with seeded random weights, in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = getattr(transformers, family.model_class)._from_config(
            family.config(), attn_implementation=impl, dtype=torch.float32
        )
    return model.eval()


def packed_batch(rows: list[list[int]] = ROWS, pad_to: int = PACK_SIZE, seed: int = 1):
    """A batch from the real packer (``pack_documents`` + ``collate_packs``) and its docs."""
    gen = torch.Generator().manual_seed(seed)
    packs, docs = [], []
    for r, lengths in enumerate(rows):
        row = [
            EncodedSample(
                __key__=f"r{r}d{i}",
                __restore_key__=(),
                tokens=torch.randint(3, VOCAB, (n,), generator=gen),
                loss_mask=torch.ones(n, dtype=torch.bool),
            )
            for i, n in enumerate(lengths)
        ]
        docs.append(row)
        packs.append(pack_documents(row))
    return collate_packs(packs, pad_to=pad_to), docs


@torch.no_grad()
def max_difference(model: torch.nn.Module, impl: str, batch, docs) -> tuple[float, float]:
    """(max |logit diff| over real tokens, |loss diff|) of the packed run vs. docs alone."""
    out = model(**batch.hf_kwargs(impl, config=model))
    logits = out.logits.view(len(docs), -1, out.logits.shape[-1])  # hybrids: (1, B*L) row
    worst, total, count = 0.0, 0.0, 0
    for r, row in enumerate(docs):
        start = 0
        for doc, padded in zip(row, batch.doc_lengths_padded[r]):
            alone = model(input_ids=doc.tokens.view(1, -1)).logits[0]
            got = logits[r, start : start + doc.length]
            diff = float((got - alone).abs().max())
            worst = max(worst, diff if diff == diff else float("inf"))
            total += float(
                torch.nn.functional.cross_entropy(alone[:-1], doc.tokens[1:], reduction="sum")
            )
            count += doc.length - 1
            start += padded
    return worst, abs(float(out.loss) - total / count)


@dataclass(frozen=True)
class Cell:
    """One cell's outcome."""

    outcome: str
    #: ``raises``: the error's feature; ``exact`` / ``differs``: the differences.
    detail: str = ""
    #: ``exact``: the registry entry ``(class name, impl, features)`` it proves.
    entry: tuple[str, str, str] | None = None


def run_cell(family: Family, impl: str) -> Cell:
    """Ask ``check_model`` (registry off), then measure what it accepted (one thread: tiny
    matrices, and CI runners oversubscribed by torch's default thread count)."""
    if not family.supports(impl):
        return Cell("n/a")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_cell(family, impl)
    finally:
        torch.set_num_threads(threads)


def _run_cell(family: Family, impl: str) -> Cell:
    with route(family, impl):
        try:
            if family.composite:
                check_model(family.raw_config(), impl, pack_size=PACK_SIZE)
                raise AssertionError(f"{family.name}: accepted, but the matrix cannot build it")
            try:
                model = build_model(family, impl)
            except Exception:  # noqa: BLE001 - then check_model must refuse the config
                check_model(family.raw_config(), impl, pack_size=PACK_SIZE)
                raise
            report = check_model(model, impl, pack_size=PACK_SIZE)
            logits, loss = max_difference(model, impl, *packed_batch())
        except PackingNotExactError as err:
            return Cell("raises", err.feature)
    detail = f"logits {logits:.1e}, loss {loss:.1e}"
    if not (logits <= 1e-5 and loss <= 1e-5):
        return Cell("differs", detail)
    text = model.config.get_text_config(decoder=True)
    return Cell("exact", detail, (type(model).__name__, impl, _verify.features(text, report)))


def registry(cells: dict[tuple[str, str], Cell]) -> dict[str, dict[str, list[str]]]:
    """``verified.json`` as the exact cells prove it."""
    out: dict[str, dict[str, list[str]]] = {}
    for cell in cells.values():
        if cell.entry is not None:
            cls, impl, key = cell.entry
            keys = out.setdefault(cls, {}).setdefault(impl, [])
            if key not in keys:
                keys.append(key)
    return {c: {i: sorted(k) for i, k in sorted(v.items())} for c, v in sorted(out.items())}


def markdown_table(
    cells: dict[tuple[str, str], Cell], written: dict[str, str] | None = None
) -> str:
    """The table of ``docs/howto/kernels.md``; ``written``: rows (by family name) kept as they
    are for the families ``cells`` does not hold."""
    lines = ["| model (tiny) | " + " | ".join(IMPLEMENTATIONS) + " |"]
    lines.append("|---|" + "---|" * len(IMPLEMENTATIONS))
    for family in FAMILIES:
        if written is not None and (family.name, IMPLEMENTATIONS[0]) not in cells:
            lines.append(written[family.name])
            continue
        row = []
        for impl in IMPLEMENTATIONS:
            cell = cells[family.name, impl]
            row.append(f"raises: {cell.detail}" if cell.outcome == "raises" else cell.outcome)
        lines.append(f"| {family.name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
