# SPDX-License-Identifier: Apache-2.0
"""Accept a model for packing only when packing is verified for it, else refuse.

Verified means: a cell of the family matrix proven on the installed transformers and torch
versions (``verified.json``, written by ``tests/benchmarks/model_matrix.py --write``), or the
experiment of ``_experiment.py`` (a small random copy of the model's class, every layer, rows
as long as the packs) gives the same outputs and loss packed as each document alone, in eval
and train mode. See ``docs/howto/kernels.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
from dataclasses import replace
from typing import Any

from energon_pack.attention import _verdicts
from energon_pack.attention._compat import (
    ModelReport,
    PackingNotExactError,
    config_report,
    explain_failure,
    refuse_structure,
    text_config,
)
from energon_pack.attention._experiment import (
    TOLERANCE,
    ForwardFailed,
    cpu_route,
    experiment,
    tiny_config,
    unbuilt,
)
from energon_pack.attention._implementations import IMPLEMENTATIONS as _IMPLEMENTATIONS
from energon_pack.attention._implementations import implementation
from energon_pack.attention._instance import check_instance, unwrapped
from energon_pack.attention._linear_reference import kernel_functions, missing_kernels

__all__ = [
    "IMPLEMENTATIONS",
    "check_model",
    "cpu_route",
    "features",
    "tiny_config",
]

#: The ``attn_implementation`` values packing serves.
IMPLEMENTATIONS = tuple(_IMPLEMENTATIONS)
#: Config booleans that do not change a forward pass (left out of the matrix key).
_NEUTRAL_FLAGS = {
    "return_dict", "use_cache", "tie_word_embeddings", "output_hidden_states",
    "output_attentions", "torchscript", "use_return_dict", "is_composition",
}  # fmt: skip

_VERDICTS: dict[tuple[Any, ...], ModelReport | PackingNotExactError] = {}


def _verified() -> dict[str, dict[str, list[str]]]:
    """The family matrix's exact cells for the installed versions (none on other versions)."""
    return _verdicts.table()


def features(config: Any, report: ModelReport) -> str:
    """The features of a (text) config, as the matrix registry keys them:
    ``"full+sliding|rope=default|flags=use_sliding_window"`` (flags: every config boolean that
    is True, except the few that cannot change a forward pass: ``_NEUTRAL_FLAGS``). A flag the
    matrix has not seen (``output_router_logits``, ``attention_bias``) sends the combination
    to the experiment."""
    kinds = sorted({"full" if x.is_full else "window" if x.window else "chunk"
                    for x in report.local.values()})  # fmt: skip
    flags = sorted(k for k, v in vars(config).items()
                   if v is True and not k.startswith("_") and k not in _NEUTRAL_FLAGS)  # fmt: skip
    both = f"|both={report.bidirectional}" if report.bidirectional else ""
    state = f"|state={'+'.join(report.state_layers)}" if report.state_layers else ""
    rope = ",".join(report.rope_types)
    return f"{'+'.join(kinds)}|rope={rope}|flags={','.join(flags)}{both}{state}"


def _model_class(config: Any) -> type | None:
    auto = importlib.import_module("transformers.models.auto.modeling_auto")
    for mapping in ("MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING"):
        with contextlib.suppress(KeyError):
            return getattr(auto, mapping)[type(config)]
    with contextlib.suppress(KeyError):
        return auto.MODEL_MAPPING[type(config)]
    return _module_model_class(config)


def _module_model_class(config: Any) -> type | None:
    """The one base model class of the config's own transformers modeling module built from
    exactly this config class, where no auto mapping lists it (the text configs of
    Ernie-4.5-VL, HunYuan-VL, PaddleOCR-VL: ``Ernie4_5_VLMoeTextModel``); None otherwise."""
    name = type(config).__module__
    if not name.startswith("transformers.models.") or ".configuration_" not in name:
        return None
    try:
        module = importlib.import_module(name.replace(".configuration_", ".modeling_"))
    except ImportError:
        return None
    found = {
        c
        for c in vars(module).values()
        if isinstance(c, type)
        and c.__dict__.get("config_class") is type(config)
        and c.__name__.endswith("Model")
        and not c.__name__.endswith("PreTrainedModel")
    }
    # aliases (``Ernie4_5_VL_MoeTextModel``) subclass the class they rename
    roots = [c for c in found if not any(c is not d and issubclass(c, d) for d in found)]
    return roots[0] if len(roots) == 1 else None


def _digest(config: Any) -> str:
    return hashlib.sha1(config.to_json_string(use_diff=False).encode()).hexdigest()


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
    impl = attn_implementation or "sdpa"  # check_instance gave the loaded one where set
    implementation(impl)  # ValueError naming the choices
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
    _check_kernels(verdict, cls, config)
    return verdict


def _check_kernels(report: ModelReport, cls: type | None, config: Any) -> None:
    """A hybrid's route is exact only through the kernels (transformers' PyTorch fallbacks
    raise on ``cu_seqlens`` / ``seq_idx``): refuse, naming the packages, where they are not
    installed (inside :func:`cpu_route` the references stand in for them)."""
    if not report.state_layers:
        return
    decoder = (
        _model_class(text_config(config))
        if cls is None or text_config(config) is not config
        else cls
    )
    missing = missing_kernels(decoder) if decoder is not None else []
    if missing:
        reads = {"causal-conv1d": "seq_idx for causal_conv1d_fn",
                 "flash-linear-attention": "cu_seqlens for chunk_gated_delta_rule",
                 "mamba-ssm": "seq_idx for mamba_chunk_scan_combined"}  # fmt: skip
        raise PackingNotExactError(
            f"{list(report.state_layers)} layers of {decoder.__name__} without their kernels",
            "these layers keep the documents of a packed row apart only inside the kernels "
            f"transformers calls for them ({', '.join(reads[m] for m in missing)}); without "
            "them transformers' PyTorch fallbacks raise on packed input. Verified: "
            f"{report.verified_by}, through transformers' route with PyTorch reference kernels",
            f"pip install {' '.join(missing)} (CUDA), or check on CPU inside "
            "energon_pack.attention.cpu_route(impl, model_class)",
        )


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
        made = _verdicts.table_versions()
        return replace(
            report,
            verified_by=f"family matrix (transformers {made['transformers']}, "
            f"torch {made['torch']})",
        )
    try:
        logits, loss, mode = _measured(text, decoder, impl, pack_size)
    except PackingNotExactError as err:
        if text is config or getattr(err, "stage", "") != "config":
            raise
        # a multimodal model's text config can carry flags that mean something only in the
        # outer model (PaliGemma's bidirectional prefix): its config checks above decide
        return replace(report, verified_by="multimodal: outer config checks")
    if not logits <= TOLERANCE:
        explain_failure(decoder)
    if report.state_layers and not (logits <= TOLERANCE and loss <= TOLERANCE):
        kernels = sorted(
            n for n in kernel_functions(decoder) if "update" not in n and "recurrent" not in n
        )
        raise PackingNotExactError(
            f"non-attention layer types {list(report.state_layers)} in config.layer_types",
            f"with the batch flattened and cu_seq_lens_q / seq_idx given, {decoder.__name__}'s "
            f"packed outputs differ from each document alone (max {logits:.2g}, loss {loss:.2g}, "
            f"measured through transformers' route to {', '.join(kernels)} with reference "
            "kernels): these layers do not get the document borders",
            "train this model unpacked (one document per row, right padding)",
        )
    if not (logits <= TOLERANCE and loss <= TOLERANCE):
        what = "outputs" if logits > TOLERANCE else "loss"
        raise PackingNotExactError(
            f"{decoder.__name__} with {impl}",
            f"packed rows give other {what} than each document alone in {mode} mode (max "
            f"output difference {logits:.2g}, loss difference {loss:.2g}, measured on a small "
            f"random copy with every layer, windows and chunks shrunk to 8): something in its "
            f"forward mixes the documents of a row",
            "train this model unpacked, or try another attn_implementation",
        )
    return replace(report, verified_by=f"tiny copy (max |logit diff| {logits:.0e})")


def _measured(
    text: Any, decoder: type, impl: str, pack_size: int | None
) -> tuple[float, float, str]:
    """The experiment's (output diff, loss diff, mode), from the per-version disk cache where
    it was run before; raises :class:`PackingNotExactError` for what it cannot run."""
    try:
        tiny = tiny_config(text, pack_size)
    except Exception as err:  # noqa: BLE001 - transformers validates configs its own ways
        raise unbuilt(decoder, err) from err
    key = _verdicts.key(decoder, tiny, impl, pack_size)
    outcome = _verdicts.cached(key)
    if outcome is None:
        outcome = _run(tiny, decoder, impl, pack_size)
        _verdicts.store(key, outcome)
    if "refused" in outcome:
        error = PackingNotExactError(*outcome["refused"])
        error.stage = outcome["stage"]
        raise error
    logits, loss, mode = outcome["difference"]
    return float(logits), float(loss), mode


def _run(tiny: Any, decoder: type, impl: str, pack_size: int | None) -> dict[str, Any]:
    """The experiment's outcome as a JSON value: ``{"difference": [...]}`` or
    ``{"refused": [feature, why, remedy], "stage": "config" | "forward"}``."""
    try:
        return {"difference": list(experiment(tiny, decoder, impl, pack_size))}
    except PackingNotExactError as err:  # the copy's config checks, or it could not be built
        stage = getattr(err, "stage", "config")
        return {"refused": [err.feature, err.why, err.remedy], "stage": stage}
    except ForwardFailed as err:
        try:
            explain_failure(decoder)
        except PackingNotExactError as named:
            return {"refused": [named.feature, named.why, named.remedy], "stage": "forward"}
        cause = err.__cause__
        return {
            "stage": "forward",
            "refused": [
                f"{decoder.__name__} with {impl}",
                f"its forward raises on packed rows (a document mask and per-document "
                f"positions) in {err.args[0]} mode: {type(cause).__name__}: {str(cause)[:300]}",
                "train this model unpacked, or try another attn_implementation",
            ],
        }
