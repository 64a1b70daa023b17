# SPDX-License-Identifier: Apache-2.0
"""The model instance as it will run: what its class name and config do not show.

:func:`check_model` verifies a family (a transformers class and its config). Before it does,
:func:`check_instance` looks at the instance the user passes:

1. PEFT: LoRA-style adapters (per token, on Linear / Embedding layers) are looked through to
   the base model; prompt / prefix / p-tuning (virtual tokens and a 2-D mask prepended to the
   row) are refused by name.
2. The implementation it was loaded with (``config._attn_implementation``, the text config's
   for VLMs) must be the one the kwargs are built for; none requested: the loaded one.
3. MoE ``output_router_logits=True``: the load-balancing loss reads the mask as 2-D padding.
4. Code that is not transformers' own (:mod:`._foreign`): the family verdict does not apply,
   so a small model is measured on the instance itself (packed rows vs each document alone)
   and a large one is refused, pointing to the first-batch check.
"""

from __future__ import annotations

import copy
import inspect
import weakref
from dataclasses import replace
from typing import Any

import torch

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
    experiment_rows,
    no_randomness,
    packed_vs_alone,
)
from energon_pack.attention._foreign import foreign_code
from energon_pack.attention._implementations import IMPLEMENTATIONS

__all__ = ["PARAMETER_CAP", "check_instance", "loaded_implementation", "unwrapped", "vouch"]

#: The largest model (parameters) measured on the instance itself when it holds foreign code.
PARAMETER_CAP = 50_000_000
_FIRST_BATCH = (
    "check your first packed batch on this model: energon_pack.attention.check_first_batch("
    "model, batch, config=model.config) (PackedTrainer does it by default); once it passes, "
    "this model is accepted with config=model"
)
#: Instances check_first_batch found exact: implementation -> (code identity, the code).
_VOUCHED: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
#: Measured verdicts per instance, by implementation, pack size and the foreign code found.
_MEASURED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


def check_instance(
    model_or_config: Any, attn_implementation: str | None, pack_size: int | None
) -> tuple[Any, str | None, ModelReport | None]:
    """(the model or config to verify, the implementation, a verdict measured on the
    instance or None: the family verdict applies); raises :class:`PackingNotExactError`."""
    model = _without_adapters(model_or_config)
    config = getattr(model, "config", model)
    impl = loaded_implementation(config, attn_implementation)
    if _computes_router_loss(model):
        _refuse_router_loss(config)
    if config is model or not isinstance(model, torch.nn.Module) or impl not in IMPLEMENTATIONS:
        return model, impl, None
    found = foreign_code(model)
    if not found:
        return model, impl, None
    if _VOUCHED.get(model, {}).get(impl, (None,))[0] == _identity(found):
        refuse_structure(config)
        report = config_report(config, impl, pack_size)
        return model, impl, replace(report, verified_by="first-batch check on this instance")
    verdicts = _MEASURED.setdefault(model, {})
    key = (impl, pack_size, _identity(found))
    if key not in verdicts:
        try:
            verdict: Any = _measured(model, config, impl, pack_size, found)
        except PackingNotExactError as err:
            verdict = err
        verdicts[key] = (verdict, list(found.values()))
    verdict = verdicts[key][0]
    if isinstance(verdict, PackingNotExactError):
        raise verdict.with_traceback(None)
    return model, impl, verdict


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


def vouch(model: Any, attn_implementation: str) -> None:
    """Record that :func:`check_first_batch` found ``model``, as it is now, exact with
    ``attn_implementation``: its foreign code is then accepted without being measured here
    (until that code changes)."""
    model = _without_adapters(unwrapped(model))
    if isinstance(model, torch.nn.Module):
        found = foreign_code(model)
        _VOUCHED.setdefault(model, {})[attn_implementation] = (_identity(found), found)


def _identity(found: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """Foreign code by identity (it need not be hashable); whoever keeps it keeps it alive."""
    return tuple((text, id(code)) for text, code in found.items())


def loaded_implementation(config: Any, requested: str | None) -> str | None:
    """``requested``, or the implementation the model was loaded with when none is requested;
    a known implementation other than the loaded one is refused, naming both."""
    text = text_config(config)
    loaded = getattr(text, "_attn_implementation", None)
    loaded = loaded or getattr(config, "_attn_implementation", None)
    if (
        requested is None
        or loaded is None
        or requested == loaded
        or requested not in IMPLEMENTATIONS
    ):
        return requested or loaded
    raise PackingNotExactError(
        f"attn_implementation {requested!r} on a model loaded with {loaded!r}",
        f"the kwargs would be built for {requested} while the model attends with {loaded}, "
        "which reads them otherwise or not at all (flash ignores a 4-D mask and the others "
        "ignore flash's cu_seq_lens, so documents attend to each other; eager adds sdpa's bool "
        "mask as 1/0) or crashes",
        f"build the kwargs for the loaded one: hf_kwargs({loaded!r}, config=model), or leave "
        f"the implementation out; or load the model with attn_implementation={requested!r}",
    )


def _without_adapters(model: Any) -> Any:
    """The base model of a PEFT model whose adapters act per token; prompt learning refused."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not hasattr(model, "get_base_model"):
        return model
    active = getattr(model, "active_adapters", None) or list(configs)
    for name in active:
        peft_config = configs[name]
        if getattr(peft_config, "is_prompt_learning", False):
            kind = getattr(peft_config.peft_type, "value", peft_config.peft_type)
            raise PackingNotExactError(
                f"PEFT {kind}",
                f"it prepends {getattr(peft_config, 'num_virtual_tokens', 'its')} virtual "
                "tokens (as embeddings or past keys and values) to every row and concatenates "
                "a 2-D mask onto the attention mask: a packed row's document mask cannot hold "
                "them (sdpa, eager and flex crash) and on flash every cu_seq_lens span is "
                "shifted by the virtual tokens, so documents see each other",
                "use an adapter that acts per token (LoRA, IA3, ...), or train prompt / "
                "prefix tuning unpacked (one document per row)",
            )
    return model.get_base_model()


def _computes_router_loss(model: Any) -> bool:
    """Whether a forward in the model's classes calls transformers' load-balancing loss (a
    config alone: assumed, its causal LM does; a base model only returns the router logits)."""
    if not isinstance(model, torch.nn.Module):
        return True
    for cls in type(model).__mro__:
        forward = inspect.unwrap(cls.__dict__.get("forward", len))
        if "load_balancing_loss_func" in getattr(
            getattr(forward, "__code__", None), "co_names", ()
        ):
            return True
    return False


def _refuse_router_loss(config: Any) -> None:
    for sub in (config, text_config(config)):
        if getattr(sub, "output_router_logits", False) is True:
            raise PackingNotExactError(
                "MoE router load-balancing loss (output_router_logits=True)",
                "transformers' load_balancing_loss_func reads the attention mask as a 2-D "
                "padding mask: it crashes on the packed rows' 4-D document mask (sdpa, eager, "
                "flex) and, on flash (no mask), counts the rows' tail padding as routed "
                "tokens, so the auxiliary loss differs from the same documents unpacked",
                "set config.output_router_logits=False (no auxiliary loss), or train this "
                "model unpacked",
            )


def _measured(
    model: torch.nn.Module, config: Any, impl: str, pack_size: int | None, code: dict[str, Any]
) -> ModelReport:
    """The instance's packed rows vs each document alone, when it is small enough."""
    name, found = f"{type(model).__name__} with {impl}", list(code)
    refuse_structure(config)
    report = config_report(config, impl, pack_size)
    count = sum(p.numel() for p in model.parameters())
    if count > PARAMETER_CAP:
        raise PackingNotExactError(
            f"{name} running code that is not transformers' own ({'; '.join(found[:3])})",
            f"no family verdict covers that code, and at {count / 1e6:.0f}M parameters the "
            f"model is too large (> {PARAMETER_CAP / 1e6:.0f}M) to measure here",
            f"{_FIRST_BATCH}, or run the model without that code",
        )
    try:
        logits, loss, mode = _packed_vs_alone(model, report, pack_size)
    except Exception as err:  # noqa: BLE001 - a verdict: refused with the cause
        raise PackingNotExactError(
            name,
            f"it runs code that is not transformers' own ({'; '.join(found[:3])}) and its "
            f"packed forward pass fails ({type(err).__name__}: {err})",
            "train this model unpacked, or run it without that code",
        ) from err
    if not logits <= TOLERANCE:
        explain_failure(type(model))
    if not (logits <= TOLERANCE and loss <= TOLERANCE):
        raise PackingNotExactError(
            name,
            f"it runs code that is not transformers' own ({'; '.join(found[:3])}), and "
            f"measured on the model itself it gives other results packed than each document "
            f"alone in {mode} mode (max output difference {logits:.2g}, loss difference "
            f"{loss:.2g})",
            "train this model unpacked, or run it without that code",
        )
    return replace(report, verified_by=f"the instance itself (max |logit diff| {logits:.0e})")


def _packed_vs_alone(
    model: torch.nn.Module, report: ModelReport, pack_size: int | None
) -> tuple[float, float, str]:
    """The experiment's comparison (``experiment_rows(pack_size)``) on the instance itself, in
    float32, eval and train mode with nothing random (its mode, dropout and buffers restored):
    (max |output diff|, |loss diff|, the worse mode)."""
    training, threads = model.training, torch.get_num_threads()
    first = next(model.parameters(), None)
    if first is not None and first.dtype != torch.float32:
        model = copy.deepcopy(model).float()
    torch.set_num_threads(1)
    worst = (0.0, 0.0, "eval")
    try:
        with no_randomness(model):
            for mode in ("eval", "train"):
                model.train(mode == "train")
                logits, loss = packed_vs_alone(model, report, experiment_rows(pack_size))
                if not (logits, loss) <= worst[:2]:
                    worst = (logits, loss, mode)
    finally:
        model.train(training)
        torch.set_num_threads(threads)
    return worst
