# SPDX-License-Identifier: Apache-2.0
"""What packing has to do for a model, and what it refuses, from the config alone.

:func:`config_report` reads layer types, windows, chunks, rope limits, bidirectional blocks
and positions into a :class:`ModelReport`, or raises :class:`PackingNotExactError` for what no
mask makes exact. The refusals and their reasons: ``docs/howto/kernels.md``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any

from energon_pack.attention._errors import PackingNotExactError
from energon_pack.attention._hybrid import WITH_ATTENTION, hybrid_layers
from energon_pack.attention._implementations import implementation
from energon_pack.attention._masks import LAYER_TYPES, LocalAttention

__all__ = [
    "TOKEN_INPUTS",
    "ModelReport",
    "PackingNotExactError",
    "config_report",
    "explain_failure",
    "refuse_structure",
    "text_config",
]

#: Per-token model inputs a batch carries per document (``hf_kwargs`` passes them; a model
#: whose forward reads one is refused a batch without it).
TOKEN_INPUTS = ("moe_mm_token_type_ids",)
#: Families whose layers are recurrent cells without attention (a better message than the
#: experiment's "differs").
_RECURRENT = {"rwkv", "xlstm"}


@dataclass(frozen=True, kw_only=True)
class ModelReport:
    """What packing has to do for one model (see :func:`check_model`)."""

    #: ``config.model_type``, e.g. ``"gemma2"``.
    model_type: str
    #: The attention implementation checked (``"sdpa"``, ``"eager"``, ...).
    attn_implementation: str
    #: Per decoder layer: ``full_attention``, ``sliding_attention`` or ``chunked_attention``.
    layer_types: tuple[str, ...]
    #: The restriction of each attention layer type present (window / chunk inside a document).
    local: dict[str, LocalAttention]
    #: rope types in use (``"default"``, ``"yarn"``, ...); empty for models without rope.
    rope_types: tuple[str, ...]
    #: The model's base forward takes ``attention_mask`` as a mapping per layer type.
    accepts_mask_mapping: bool = False
    #: Pack size checked against, when given.
    pack_size: int | None = None
    #: Conditions that made a feature exact (e.g. "LongRoPE: pack_size 64 <= 4096").
    notes: tuple[str, ...] = field(default=())
    #: What attends both ways inside a document (``_model_kwargs.BIDIRECTIONAL``): ``"document"``
    #: (encoders, Gemma 3 ``use_bidirectional_attention``), ``"image_tokens"`` (Gemma 3 VLM),
    #: ``"prefix"`` (PaliGemma); None: causal.
    bidirectional: str | None = None
    #: Added to the reset positions (PaliGemma counts from 1).
    position_offset: int = 0
    #: RoBERTa's rule: positions count non-pad tokens from ``padding_idx + 1``; None: unused.
    position_padding_idx: int | None = None
    #: What proved packing exact: ``"family matrix"`` (CI) or the tiny copy's max difference.
    verified_by: str = ""
    #: Layer types that carry a state along the row (gated delta-net ``linear_attention``,
    #: LFM2 ``conv``) and keep documents apart through their kernels: the batch then goes in as
    #: one flattened ``(1, B*L)`` row with ``cu_seq_lens_q/k``, ``max_length_q/k`` and
    #: ``seq_idx`` (``_hybrid.py``).
    state_layers: tuple[str, ...] = ()
    #: Per-token inputs the model's forward reads that each document must bring from its
    #: processor (:data:`TOKEN_INPUTS`: Ernie-4.5-VL's ``moe_mm_token_type_ids``).
    token_inputs: tuple[str, ...] = ()
    #: The base model class whose forward was read for :attr:`token_inputs` (transformers'
    #: ``MODEL_MAPPING`` of the config), for messages; '' where none is mapped.
    base_model_class: str = ""

    @property
    def flattened(self) -> bool:
        """True when ``hf_kwargs`` lays the batch's packs end to end in one row."""
        return bool(self.state_layers)

    @property
    def needs_mapping(self) -> bool:
        """True when layers need different masks (a mapping per layer type)."""
        return len(set(self.local.values())) > 1


def text_config(model_or_config: Any) -> Any:
    config = getattr(model_or_config, "config", model_or_config)
    text = getattr(config, "get_text_config", None)
    return text(decoder=True) if callable(text) else config


#: Encoder families (``is_decoder=False``) proven exact with whole-document blocks, and the
#: ones among them whose positions follow RoBERTa's ``padding_idx`` rule.
_ENCODERS = ("bert", "roberta", "xlm-roberta", "camembert", "data2vec-text")
_PADDING_IDX_POSITIONS = ("roberta", "xlm-roberta", "camembert", "data2vec-text")


@functools.cache
def _base_model_class(config_class: type) -> type | None:
    """The base model class transformers maps ``config_class`` to, None if none."""
    auto = importlib.import_module("transformers.models.auto.modeling_auto")
    try:
        return auto.MODEL_MAPPING[config_class]
    except KeyError:
        return None


@functools.cache
def _base_model_source(config_class: type, method: str | None = None) -> str:
    """Source of the base model class of ``config_class`` (or of its ``method``); '' if none."""
    model_class = _base_model_class(config_class)
    try:
        return inspect.getsource(getattr(model_class, method) if method else model_class)
    except (AttributeError, TypeError, OSError):
        return ""


def _bidirectional(outer: Any, config: Any, impl: str) -> str | None:
    """What attends both ways in a document (None: causal), or PackingNotExactError."""
    outer_type, model_type = getattr(outer, "model_type", ""), getattr(config, "model_type", "")
    kind = {"gemma3": "image_tokens", "paligemma": "prefix"}.get(outer_type)
    both_ways = getattr(config, "use_bidirectional_attention", False)
    if both_ways == "vision" and outer is config:
        both_ways = False  # Gemma 4's text model alone: causal unless "all"
    elif both_ways == "vision":  # a Gemma 4 VLM
        raise PackingNotExactError(
            f"bidirectional image tokens in sliding layers only ({outer_type or model_type})",
            "its image tokens attend both ways in its sliding-window layers and causally in its "
            "global ones (use_bidirectional_attention='vision'), a mask per layer type built "
            "from mm_token_type_ids that energon-pack does not make (nor does any registered "
            "family lay out Gemma 4's images)",
            "train it unpacked",
        )
    encoder = not getattr(config, "is_decoder", True)
    encoder = encoder and "self.config.is_decoder" in _base_model_source(type(config))
    if kind is None and (encoder or both_ways):
        kind = "document"
    if kind is None:
        return None
    proven = kind != "document" or model_type in (*_ENCODERS, "gemma3_text")
    if outer_type == "gemma3" and getattr(config, "use_bidirectional_attention", False):
        proven = False  # the VLM builds causal + image masks whatever the text config says
    if not proven:
        raise PackingNotExactError(
            f"bidirectional attention ({outer_type or model_type})",
            "its documents attend both ways in a way energon-pack has not verified for this "
            "model type",
            "train it unpacked, or verify it packed against each document alone",
        )
    if implementation(impl).varlen and kind != "document":
        raise PackingNotExactError(
            f"bidirectional attention ({kind}) with flash-attn",
            "varlen flash-attn is causal or not per whole sequence: it cannot let only the "
            "image tokens or the prefix of a document attend both ways",
            "use sdpa, eager or flex_attention (their masks hold the bidirectional blocks)",
        )
    return kind


def _positions(outer: Any, config: Any) -> tuple[int, int | None]:
    """(offset, padding_idx) of the positions the model makes for a document alone."""
    if getattr(outer, "model_type", "") == "paligemma":
        return 1, None
    if getattr(config, "model_type", "") in _PADDING_IDX_POSITIONS:
        return 0, int(config.pad_token_id)
    return 0, None


def _num_layers(config: Any) -> int:
    for name in ("num_hidden_layers", "n_layer", "num_layers"):
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    raise PackingNotExactError(
        f"unreadable config {type(config).__name__}",
        "energon-pack cannot find its number of layers, so it cannot tell their attention type",
        "train this model unpacked",
    )


def _layer_types(config: Any) -> tuple[str, ...]:
    types = getattr(config, "layer_types", None)
    if types:
        return tuple(types)
    n = _num_layers(config)
    if getattr(config, "sliding_window", None) is not None:
        # Mistral, Phi3, Starcoder2: every layer uses the window
        return ("sliding_attention",) * n
    return ("full_attention",) * n


def _local_of(
    config: Any, layer_type: str, pack_size: int | None, both_ways: bool
) -> LocalAttention:
    """The layer type's window / chunk; one no pack can exceed is dropped (it never binds)."""
    window = chunk = None
    if layer_type == "sliding_attention":
        window = int(config.sliding_window)
    if layer_type == "chunked_attention":
        chunk = int(config.attention_chunk_size)
    if pack_size is not None:
        window = None if window is not None and window >= pack_size else window
        chunk = None if chunk is not None and chunk >= pack_size else chunk
    return LocalAttention(window=window, chunk=chunk, both_ways=both_ways and window is not None)


def _rope_parameters(config: Any) -> list[dict[str, Any]]:
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict):
        return []
    if "rope_type" in params:
        return [params]
    return [p for p in params.values() if isinstance(p, dict)]


def _check_alibi(config: Any) -> None:
    model_type = getattr(config, "model_type", "")
    if model_type == "bloom" or (model_type == "falcon" and getattr(config, "alibi", False)):
        raise PackingNotExactError(
            f"ALiBi ({model_type})",
            "the model builds its ALiBi bias from a 2-D padding mask, so it cannot take a "
            "document mask (a 4-D mask crashes build_alibi_tensor, a 2-D one lets documents "
            "attend to each other)",
            "train this model unpacked, or use a rotary-position variant",
        )


def _check_limit(feature: str, limit: int, pack_size: int | None, notes: list[str]) -> None:
    """Exact iff no row can reach ``limit`` tokens (positions 0..pack_size-1)."""
    if pack_size is not None and pack_size <= limit:
        notes.append(f"{feature}: pack_size {pack_size} <= {limit}")
        return
    got = "no pack_size was given" if pack_size is None else f"pack_size is {pack_size}"
    raise PackingNotExactError(
        feature,
        f"the model picks its rotary frequencies (or scales) from the largest position in the "
        f"batch once it passes {limit}, so a short document packed next to a long one is "
        f"encoded differently than alone; {got}",
        f"use packs of at most {limit} tokens (pass pack_size=...), or train unpacked",
    )


def _check_rope(config: Any, pack_size: int | None, notes: list[str]) -> tuple[str, ...]:
    types = []
    for params in _rope_parameters(config):
        rope_type = params.get("rope_type", "default")
        types.append(rope_type)
        if rope_type == "longrope":
            limit = params.get("original_max_position_embeddings") or getattr(
                config, "original_max_position_embeddings", config.max_position_embeddings
            )
            _check_limit("LongRoPE", int(limit), pack_size, notes)
        elif "dynamic" in rope_type:
            _check_limit("dynamic NTK rope", int(config.max_position_embeddings), pack_size, notes)
    return tuple(dict.fromkeys(types))


def _check_temperature_tuning(config: Any, pack_size: int | None, notes: list[str]) -> None:
    no_rope = getattr(config, "no_rope_layers", None) or ()
    if getattr(config, "attn_temperature_tuning", False) and 0 in no_rope:
        # scale = log1p(floor((row_index + 1) / floor_scale)) * attn_scale + 1: 1 while < floor
        _check_limit(
            "Llama 4 attention temperature tuning", int(config.floor_scale) - 1, pack_size, notes
        )


def _check_flash_chunks(impl: str, local: dict[str, LocalAttention], pack_size: int | None) -> None:
    chunks = [x.chunk for x in local.values() if x.chunk is not None]
    if implementation(impl).varlen and chunks:
        if pack_size is not None and pack_size <= min(chunks):
            return
        raise PackingNotExactError(
            "chunked attention with flash-attn",
            f"flash-attn has no chunked mode and packs may be longer than the chunk "
            f"({min(chunks)} tokens)",
            "use sdpa, eager or flex_attention, or packs no longer than the chunk",
        )


#: The largest head dimension flash-attn's kernels (2 and 3) take.
FLASH_MAX_HEAD_DIM = 256


def _head_dims(config: Any) -> set[int]:
    """Every layer's head dimension: the config's, and its per-layer overrides (Gemma 4's
    global layers: 512), read without the global attribute heterogeneous configs refuse."""
    data = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    dims = {int(data["head_dim"])} if isinstance(data.get("head_dim"), int) else set()
    for layer in getattr(config, "per_layer_config", None) or ():
        dim = getattr(layer, "head_dim", None)
        if isinstance(dim, int):
            dims.add(dim)
    return dims


def _check_flash_head_dim(config: Any, impl: str) -> None:
    dims = _head_dims(config)
    if implementation(impl).varlen and dims and max(dims) > FLASH_MAX_HEAD_DIM:
        raise PackingNotExactError(
            f"head_dim {max(dims)} with flash-attn ({getattr(config, 'model_type', '')})",
            f"flash-attn's kernels take head dimensions up to {FLASH_MAX_HEAD_DIM}, and some of "
            f"this model's layers have {max(dims)} (Gemma 4's global layers), so its varlen "
            "route cannot run them",
            "use sdpa, eager or flex_attention",
        )


def config_report(model_or_config: Any, impl: str, pack_size: int | None) -> ModelReport:
    """What packing has to do for this model (multimodal: its text config), from the config
    alone; raises :class:`PackingNotExactError` for what no mask makes exact."""
    config = text_config(model_or_config)
    outer = getattr(model_or_config, "config", model_or_config)
    layer_types = _layer_types(config)
    present = [t for t in dict.fromkeys(layer_types) if t in LAYER_TYPES]
    state_layers = hybrid_layers(
        outer, config, [t for t in dict.fromkeys(layer_types) if t not in LAYER_TYPES]
    )
    if set(state_layers) & set(WITH_ATTENTION) and "full_attention" not in present:
        present.append("full_attention")  # the attention block inside those layers
    _check_alibi(config)
    notes: list[str] = []
    rope_types = _check_rope(config, pack_size, notes)
    _check_temperature_tuning(config, pack_size, notes)
    bidirectional = _bidirectional(outer, config, impl)
    both_ways = bidirectional == "document"
    local = {t: _local_of(config, t, pack_size, both_ways) for t in present}
    _check_flash_chunks(impl, local, pack_size)
    _check_flash_head_dim(config, impl)
    forward = _base_model_source(type(outer), "forward")
    base = _base_model_class(type(outer))
    accepts = "attention_mask, dict)" in forward
    offset, padding_idx = _positions(outer, config)
    report = ModelReport(
        model_type=getattr(config, "model_type", type(config).__name__),
        attn_implementation=impl,
        layer_types=layer_types,
        local=local,
        rope_types=rope_types,
        accepts_mask_mapping=accepts,
        pack_size=pack_size,
        notes=tuple(notes),
        bidirectional=bidirectional,
        position_offset=offset,
        position_padding_idx=padding_idx,
        state_layers=state_layers,
        token_inputs=tuple(name for name in TOKEN_INPUTS if name in forward),
        base_model_class="" if base is None else base.__name__,
    )
    if report.needs_mapping and not accepts and not implementation(impl).varlen:
        reach = min(
            min(x.window or x.chunk, x.chunk or x.window) for x in local.values() if not x.is_full
        )
        raise PackingNotExactError(
            f"layer types {present} in {getattr(outer, 'model_type', report.model_type)}",
            "its layers need different masks but its forward takes a single attention_mask",
            f"use packs of at most {reach} tokens (windows and chunks then never bind), a "
            "flash_attention implementation (windows are applied per document; "
            "causal models only), or train unpacked",
        )
    return report


def refuse_structure(config: Any) -> None:
    """Refuse recurrent models and encoder-decoders, from the config."""
    name = type(config).__name__
    if getattr(config, "model_type", "") in _RECURRENT:
        raise PackingNotExactError(
            f"recurrent layers without attention ({name})",
            "the recurrent state runs from one document into the next and the model has no "
            "input that resets it at a document border",
            "train this model unpacked (one document per row)",
        )
    if getattr(config, "is_encoder_decoder", False):
        raise PackingNotExactError(
            f"encoder-decoder ({name})",
            "the encoder builds its own padding mask over the packed row and the decoder "
            "cross-attends to all of it, so documents see each other",
            "train this model unpacked, or pack only a decoder-only model",
        )


def explain_failure(model_class: type) -> None:
    """Name the mechanism of a model packing was measured to change, where it is known."""
    # a subclass whose forward passes **kwargs on to a base that takes them can be given them
    forwards = [c.__dict__["forward"] for c in model_class.__mro__ if "forward" in c.__dict__]
    if not any("position_ids" in inspect.signature(f).parameters for f in forwards):
        raise PackingNotExactError(
            f"no position_ids in {model_class.__name__}.forward",
            "the model counts positions 0..L-1 over the whole packed row, so every document "
            "after the first is encoded at the wrong positions",
            "train this model unpacked (one document per row)",
        )
