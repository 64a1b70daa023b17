# SPDX-License-Identifier: Apache-2.0
"""Accept a model for packing only when packing is verified for it, else refuse.

Verified means: listed by the family matrix (``verified.json``, written by
``tests/benchmarks/model_matrix.py --write``), or a tiny random copy of the model's class gives
the same logits and loss packed as each document alone. See ``docs/howto/kernels.md``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention.flex_attention import flex_attention

from energon_pack.attention._compat import (
    ModelReport,
    PackingNotExactError,
    config_report,
    explain_failure,
    refuse_structure,
    text_config,
)
from energon_pack.attention._flash_reference import FLASH_IMPLEMENTATIONS, emulated_flash
from energon_pack.attention._instance import check_instance
from energon_pack.attention._metadata import document_metadata
from energon_pack.attention._model_kwargs import hf_model_kwargs

__all__ = [
    "IMPLEMENTATIONS",
    "check_model",
    "cpu_route",
    "features",
    "tiny_config",
]

#: The ``attn_implementation`` values packing serves.
IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention", *FLASH_IMPLEMENTATIONS)
ROWS = [[20, 12], [7, 3]]
PACK = 34
TOLERANCE = 1e-5
#: Size fields of a config and the most a tiny copy keeps (smaller values stay).
_CAPS = {
    **dict.fromkeys(["hidden_size", "n_embd", "d_model", "embed_dim"], 64),
    **dict.fromkeys(["intermediate_size", "ffn_dim", "n_inner", "intermediate_size_mlp"], 128),
    **dict.fromkeys(["num_attention_heads", "n_head", "num_heads"], 4),
    **dict.fromkeys(["decoder_attention_heads", "encoder_attention_heads"], 4),
    **dict.fromkeys(["decoder_ffn_dim", "encoder_ffn_dim"], 128),
    **dict.fromkeys(["decoder_layers", "encoder_layers"], 2),
    **dict.fromkeys(["num_key_value_heads", "num_kv_heads", "multi_query_group_num"], 2),
    **dict.fromkeys(["head_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"], 16),
    **dict.fromkeys(["kv_lora_rank", "q_lora_rank", "hidden_size_per_layer_input"], 16),
    **dict.fromkeys(["moe_intermediate_size", "shared_expert_intermediate_size"], 32),
    **dict.fromkeys(["num_local_experts", "num_experts", "n_routed_experts"], 4),
    **dict.fromkeys(["num_experts_per_tok", "n_shared_experts", "n_group", "topk_group"], 1),
    **dict.fromkeys(["vocab_size", "vocab_size_per_layer_input"], 256),
    **dict.fromkeys(["sliding_window", "attention_chunk_size", "rotary_dim"], 8),
}
_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers")
_UNSET = object()


class _ForwardFailed(Exception):
    """The tiny copy was built but its forward pass failed (the cause is chained)."""


_VERDICTS: dict[tuple[Any, ...], ModelReport | PackingNotExactError] = {}


@functools.cache
def _verified() -> dict[str, dict[str, list[str]]]:
    """The family matrix's exact cells: class name -> implementation -> feature keys."""
    return json.loads((Path(__file__).parent / "verified.json").read_text())


def features(config: Any, report: ModelReport) -> str:
    """The attention features of a (text) config, as the matrix registry keys them:
    ``"full+sliding|rope=default|flags=use_sliding_window"`` (flags: attention-related
    config booleans that are True)."""
    kinds = sorted({"full" if x.is_full else "window" if x.window else "chunk"
                    for x in report.local.values()})  # fmt: skip
    words = ("attention", "attn", "bidirectional", "causal", "alibi", "decoder", "window")
    flags = sorted(k for k, v in vars(config).items()
                   if v is True and any(w in k for w in words))  # fmt: skip
    both = f"|both={report.bidirectional}" if report.bidirectional else ""
    return f"{'+'.join(kinds)}|rope={','.join(report.rope_types)}|flags={','.join(flags)}{both}"


def _model_class(config: Any) -> type | None:
    auto = importlib.import_module("transformers.models.auto.modeling_auto")
    for mapping in ("MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING"):
        with contextlib.suppress(KeyError):
            return getattr(auto, mapping)[type(config)]
    with contextlib.suppress(KeyError):
        return auto.MODEL_MAPPING[type(config)]
    return None


def _digest(config: Any) -> str:
    return hashlib.sha1(config.to_json_string(use_diff=False).encode()).hexdigest()


def unwrapped(model: Any) -> Any:
    """The model inside DDP / DataParallel / FSDP (``.module``) and ``torch.compile``
    (``._orig_mod``) wrappers, which have no ``config`` of their own."""
    while True:
        inner = getattr(model, "_orig_mod", None)  # forwards .config: look through it anyway
        if inner is None and not hasattr(model, "config"):
            inner = getattr(model, "module", None)
        if inner is None:
            return model
        model = inner


def check_model(
    model_or_config: Any,
    attn_implementation: str | None = None,
    *,
    pack_size: int | None = None,
) -> ModelReport:
    """Whether packing is exact for this model and how; refuses before the first step.

    Args:
        model_or_config: a transformers model (its class is checked; DDP / FSDP /
            ``torch.compile`` wrappers are looked through) or its config (the class
            transformers' auto mappings give it).
        attn_implementation: one of :data:`IMPLEMENTATIONS`; default: the config's own.
        pack_size: the longest row the model will see (rope scaling and temperature tuning
            are exact only below their limits).

    Returns a :class:`ModelReport` (``verified_by`` says how); raises
    :class:`PackingNotExactError` naming the mechanism, why and what to do.
    """
    model_or_config, attn_implementation, measured = check_instance(
        unwrapped(model_or_config), attn_implementation, pack_size
    )
    if measured is not None:  # code the class does not show, verified on the instance
        return measured
    config = getattr(model_or_config, "config", model_or_config)
    impl = attn_implementation or getattr(config, "_attn_implementation", None) or "sdpa"
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"unknown attn_implementation {impl!r}; choose one of {IMPLEMENTATIONS}")
    cls = type(model_or_config) if config is not model_or_config else _model_class(config)
    key = (cls, _digest(config), impl, pack_size)
    if key not in _VERDICTS:
        try:
            _VERDICTS[key] = _verdict(config, cls, impl, pack_size)
        except PackingNotExactError as err:
            _VERDICTS[key] = err
    verdict = _VERDICTS[key]
    if isinstance(verdict, PackingNotExactError):
        raise verdict.with_traceback(None)
    return verdict


def _verdict(config: Any, cls: type | None, impl: str, pack_size: int | None) -> ModelReport:
    text = text_config(config)
    decoder = cls if text is config else _model_class(text)
    refuse_structure(config)
    if cls is None or decoder is None:
        raise PackingNotExactError(
            f"unknown model class for {type(config).__name__}",
            "transformers maps this config to no model class, so no tiny copy can be built "
            "to verify packing on",
            "pass the model itself: check_model(model, ...)",
        )
    report = config_report(config, impl, pack_size)
    key = features(text, report)
    if decoder.__module__.startswith("transformers.") and key in _verified().get(
        decoder.__name__, {}
    ).get(impl, ()):
        return replace(report, verified_by="family matrix")
    try:
        difference = experiment(text, decoder, impl, pack_size)
    except PackingNotExactError:
        if text is config:
            raise
        # a multimodal model's text config can carry flags that mean something only in the
        # outer model (PaliGemma's bidirectional prefix): its config checks above decide
        return replace(report, verified_by="multimodal: outer config checks")
    except _ForwardFailed as err:
        explain_failure(decoder)
        raise PackingNotExactError(
            f"{decoder.__name__} with {impl}",
            f"its tiny copy fails on packed rows ({type(err.__cause__).__name__}: {err.__cause__})",
            "train this model unpacked, or try another attn_implementation",
        ) from err
    logits, loss = difference
    if not logits <= TOLERANCE:
        explain_failure(decoder)
    if not (logits <= TOLERANCE and loss <= TOLERANCE):
        raise PackingNotExactError(
            f"{decoder.__name__} with {impl}",
            f"a tiny random copy of the model gives other results packed than each document "
            f"alone (max logit difference {logits:.2g}, loss difference {loss:.2g}; windows "
            f"and chunks shrunk to 8)",
            "train this model unpacked, or try another attn_implementation",
        )
    return replace(report, verified_by=f"tiny copy (max |logit diff| {logits:.0e})")


def tiny_config(config: Any, pack_size: int | None = None) -> Any:
    """A copy of a (text) config small enough to build and run at once, same features.

    Keeps the shortest prefix of layers holding every layer type (at least 2), truncates the
    per-layer lists to it, and caps the size fields of ``_CAPS`` (token ids too). A window or
    chunk no pack of ``pack_size`` reaches stays out of reach of the experiment's rows.
    """
    data = copy.deepcopy(config.to_dict())
    out_of_reach = [n for n in ("sliding_window", "attention_chunk_size")
                    if pack_size and isinstance(data.get(n), int) and data[n] >= pack_size]  # fmt: skip
    for sub in [data, data.get("rope_parameters") or {}]:  # rope limits no pack reaches
        for name in ("max_position_embeddings", "original_max_position_embeddings", "floor_scale"):
            if pack_size and isinstance(sub.get(name), int) and sub[name] >= pack_size:
                sub[name] = max(sub[name], PACK + 1)
    types = data.get("layer_types") or []
    layers = next((data[n] for n in _LAYER_COUNTS if isinstance(data.get(n), int)), 2)
    n = min(layers, max([2] + [types.index(t) + 1 for t in set(types)]))
    if data.get("num_kv_shared_layers"):  # Gemma 3n: the last layers reuse earlier caches
        n, data["num_kv_shared_layers"] = min(layers, 2 * n), n
    old_head = _head_dim(data)
    for name, value in data.items():
        if isinstance(value, list) and len(value) == layers and name != "rope_parameters":
            data[name] = value[:n]
        elif name in _LAYER_COUNTS and value == layers:
            data[name] = n
    if isinstance(data.get("per_layer_config"), dict):  # Gemma 4: overrides per layer index
        per_layer = {k: _cap(v, 256) for k, v in data["per_layer_config"].items() if int(k) < n}
        data["per_layer_config"] = per_layer
    mha = data.get("num_key_value_heads", 0) == data.get("num_attention_heads")
    _cap(data, data.get("vocab_size", 256))
    data.update(dict.fromkeys(out_of_reach, PACK))
    if mha:  # multi-head (and MLA, which needs it): keep key/value heads = query heads
        data["num_key_value_heads"] = data["num_attention_heads"]
    if "qk_head_dim" in data:  # MLA: derived
        data["qk_head_dim"] = data["qk_nope_head_dim"] + data["qk_rope_head_dim"]
    _shrink_rope(data.get("rope_parameters"), old_head, _head_dim(data))
    return type(config).from_dict(data)


def _cap(data: dict[str, Any], vocab: int) -> dict[str, Any]:
    for name, value in data.items():
        if isinstance(value, int) and not isinstance(value, bool) and name in _CAPS:
            data[name] = min(value, _CAPS[name])
        if name.endswith("_token_id") and isinstance(value, int):  # ids past the small
            data[name] = min(value, min(vocab, 256) - 1)  # vocabulary: its last id
        elif name.endswith("_token_id") and isinstance(value, list):
            data[name] = [min(v, min(vocab, 256) - 1) for v in value]
    return data


def _head_dim(data: dict[str, Any]) -> int | None:
    heads = next((data[n] for n in ("num_attention_heads", "n_head") if data.get(n)), None)
    hidden = next((data[n] for n in ("hidden_size", "n_embd", "d_model") if data.get(n)), None)
    return data.get("head_dim") or (hidden // heads if hidden and heads else None)


def _shrink_rope(params: Any, old: int | None, new: int | None) -> None:
    """Per-frequency lists (LongRoPE factors, mRoPE sections) to the tiny head size."""
    if not isinstance(params, dict) or not old or not new:
        return
    for sub in [params, *(p for p in params.values() if isinstance(p, dict))]:
        for name in ("short_factor", "long_factor"):
            if isinstance(sub.get(name), list):
                sub[name] = sub[name][: len(sub[name]) * new // old]
        section = sub.get("mrope_section")
        if isinstance(section, list) and sum(section) > new // 2:
            scaled = [max(1, s * new // old) for s in section]
            sub["mrope_section"] = [*scaled[:-1], new // 2 - sum(scaled[:-1])]


@contextlib.contextmanager
def cpu_route(impl: str, model_class: type | None = None) -> Iterator[None]:
    """Flash through the reference kernel, FlexAttention uncompiled (same math)."""
    if impl in FLASH_IMPLEMENTATIONS:
        with emulated_flash(impl, model_class):
            yield
        return
    if impl != "flex_attention":
        yield
        return
    flex = importlib.import_module("transformers.integrations.flex_attention")
    masking = importlib.import_module("transformers.masking_utils")
    wrapper, build = flex.WrappedFlexAttention, masking.create_block_mask
    names = ("_instance", "_is_flex_compiled", "_compiled_flex_attention", "training")
    saved = {name: wrapper.__dict__.get(name, _UNSET) for name in names}
    values = (None, True, staticmethod(flex_attention), False)
    for name, value in zip(names, values):
        setattr(wrapper, name, value)
    # transformers would compile its own block masks, once per shape (slow on CPU)
    masking.create_block_mask = lambda *args, **kw: build(*args, **{**kw, "_compile": False})
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
            yield
    finally:
        masking.create_block_mask = build
        for name, value in saved.items():
            if value is _UNSET:
                delattr(wrapper, name)
            else:
                setattr(wrapper, name, value)


def experiment(
    config: Any, model_class: type, impl: str, pack_size: int | None = None
) -> tuple[float, float]:
    """(max |logit diff|, |loss diff|) packed vs alone of a tiny random ``model_class``."""
    tiny = tiny_config(config, pack_size)
    logging = importlib.import_module("transformers.utils.logging")
    verbosity, threads = logging.get_verbosity(), torch.get_num_threads()
    logging.set_verbosity_error()  # flash-attn's dtype warnings do not apply to the reference
    torch.set_num_threads(1)  # tiny matrices: threads cost more than they give
    try:
        with cpu_route(impl, model_class), torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(0)
            model, report = _build(model_class, tiny, impl), config_report(tiny, impl, PACK)
            try:
                return _packed_vs_alone(model.eval(), report)
            except Exception as err:  # noqa: BLE001 - a verdict: refused, named where known
                raise _ForwardFailed from err
    finally:
        logging.set_verbosity(verbosity)
        torch.set_num_threads(threads)


def _build(model_class: type, tiny: Any, impl: str) -> torch.nn.Module:
    try:
        return model_class._from_config(tiny, attn_implementation=impl, dtype=torch.float32)
    except ValueError as err:
        if "does not support" not in str(err):
            raise _unbuilt(model_class, err) from err
        raise PackingNotExactError(
            f"{model_class.__name__} with {impl}",
            f"transformers does not run this model with {impl} ({err})",
            "load and check it with an attn_implementation it supports",
        ) from err
    except Exception as err:  # noqa: BLE001 - any failure means: no verdict
        raise _unbuilt(model_class, err) from err


def _unbuilt(model_class: type, err: Exception) -> PackingNotExactError:
    return PackingNotExactError(
        f"{model_class.__name__} (could not verify)",
        f"its tiny copy could not be built ({type(err).__name__}: {err})",
        "pass a model built from a config that is already small (hidden_size <= 64, "
        "a few layers): the check then runs it unchanged; or train unpacked",
    )


def _packed_vs_alone(model: torch.nn.Module, report: ModelReport) -> tuple[float, float]:
    """(max |logit diff|, |loss diff|) packed vs alone; the loss with ``hf_kwargs``' labels
    (-100 at each document's first token and the padding) vs the token-weighted mean of the
    documents' losses alone (0 for models without a loss)."""
    meta = document_metadata(ROWS, length=PACK)
    vocab = model.config.get_text_config().vocab_size
    special = [v for k, v in vars(model.config).items() if k.endswith("_token_id")]
    special = torch.tensor([s for s in special if isinstance(s, int)], dtype=torch.long)
    tokens = torch.randint(0, vocab, (len(ROWS), PACK))
    tokens[torch.isin(tokens, special)] = 1
    labels = torch.where((meta.position_ids > 0) & (meta.segment_ids > 0), tokens, -100)
    kwargs = hf_model_kwargs(meta, tokens, report)
    out = model(input_ids=tokens, labels=labels, **kwargs)
    packed, worst, total, count = _logits(out), 0.0, 0.0, 0
    for r, lengths in enumerate(ROWS):
        start = 0
        for n in lengths:
            doc = tokens[r, start : start + n]
            alone = _logits(model(input_ids=doc[None]))[0]
            diff = (packed[r, start : start + n] - alone).abs().max()
            worst = max(worst, float(diff) if diff.isfinite() else float("inf"))
            total += float(torch.nn.functional.cross_entropy(alone[:-1], doc[1:], reduction="sum"))
            count += n - 1
            start += n
    loss = getattr(out, "loss", None) if _is_causal_lm(type(model)) else None
    return worst, 0.0 if loss is None else abs(float(loss) - total / count)


def _is_causal_lm(model_class: type) -> bool:
    """Whether ``model_class`` is (a subclass of) one of transformers' causal LMs, whose loss
    shifts ``labels`` as ``hf_kwargs`` expects (masked LMs do not shift)."""
    auto = importlib.import_module("transformers.models.auto.modeling_auto")
    names = set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    return any(base.__name__ in names for base in model_class.__mro__)


def _logits(out: Any) -> torch.Tensor:
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out.last_hidden_state
