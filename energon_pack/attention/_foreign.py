# SPDX-License-Identifier: Apache-2.0
"""Code in a model instance that its class name does not show.

:func:`foreign_code` walks the instance's modules and names what is not transformers' (or
torch's) own code for that model, so no verdict about the family can cover it:

- a module whose class is defined outside transformers and torch (a user's subclass, a
  rotary module swapped for another class), except PEFT adapter layers that act per token on
  Linear / Embedding layers and containers that have no ``forward``;
- a transformers / torch class whose ``forward`` was replaced (``LlamaAttention.forward =
  my_forward``): the function, or one it wraps, is not defined in those packages as that class's
  own;
- a method set on an instance (``module.forward = ...``), except accelerate's device hooks
  and ``torch.compile`` of a submodule.

For Llama with ``LlamaAttention.forward`` patched this gives
``["LlamaAttention.forward replaced by my_module.my_forward"]``.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any

import torch

__all__ = ["foreign_code"]

#: Instance attributes every module has, and ``_compiled_call_impl`` (``module.compile()``,
#: which shadows a method without changing the math).
_MODULE_STATE = frozenset(vars(torch.nn.Module())) | {"_compiled_call_impl"}
#: Layers a PEFT tuner wraps and that act per token (what LoRA-style adapters change).
_PER_TOKEN_BASES = (torch.nn.Linear, torch.nn.Embedding)
#: PEFT helper modules of per-token adapters (DoRA's magnitude layers), by qualified name.
_PER_TOKEN_HELPERS = {
    "peft.tuners.lora.dora.DoraLinearLayer",
    "peft.tuners.lora.dora.DoraEmbeddingLayer",
    "peft.utils.other.ModulesToSaveWrapper",  # runs a copy of a module (walked too)
}


def foreign_code(model: torch.nn.Module) -> dict[str, Any]:
    """What runs in ``model`` that is not transformers' or torch's own code (see above): a
    description of each, mapped to the code itself (a class, function or hooks)."""
    found: dict[str, Any] = {}
    first: dict[type, str] = {}
    for name, module in model.named_modules():
        first.setdefault(type(module), name)
        found.update(_set_on_instance(name or type(module).__name__, module))
    for cls, name in first.items():
        problem = _foreign_class(cls, first_module=model.get_submodule(name))
        if problem:
            found[f"{problem[0]} (at {name or 'the top'})"] = problem[1]
    return found


@functools.cache
def _roots() -> tuple[str, ...]:
    import transformers  # noqa: PLC0415 - only needed once, lazily

    return tuple(str(Path(m.__file__).parent) for m in (transformers, torch))


def _trusted(module_name: str) -> bool:
    return module_name.split(".")[0] in ("transformers", "torch")


def _foreign_class(cls: type, first_module: torch.nn.Module) -> tuple[str, Any] | None:
    """What is foreign about ``cls``: the class itself or a replaced forward; None: nothing."""
    qualified = f"{cls.__module__}.{cls.__qualname__}"
    if qualified in _PER_TOKEN_HELPERS or _per_token_adapter(first_module):
        return None
    if not _trusted(cls.__module__):
        if cls.forward is torch.nn.Module.forward:  # a container, never called
            return None
        return f"class {qualified}, not defined in transformers", cls
    for base in cls.__mro__:
        forward = base.__dict__.get("forward")
        if forward is not None and _trusted(base.__module__) and not _own(forward, base):
            where = getattr(forward, "__module__", "?")
            what = getattr(forward, "__qualname__", type(forward).__name__)
            return f"{base.__qualname__}.forward replaced by {where}.{what}", forward
    return None


@functools.cache
def _own(function: Any, cls: type) -> bool:
    """Whether ``function`` is ``cls``'s own forward: it and every function it wraps are
    defined in transformers or torch, the innermost in ``cls``'s body."""
    if function is torch.nn.Module.__dict__["forward"]:
        return True
    while True:
        code = getattr(function, "__code__", None)
        if code is None or not code.co_filename.startswith(_roots()):
            return False
        inner = getattr(function, "__wrapped__", None)
        if inner is None:
            return function.__qualname__ == f"{cls.__qualname__}.forward"
        function = inner


def _per_token_adapter(module: torch.nn.Module) -> bool:
    """A PEFT tuner layer (LoRA, IA3, ...) around a Linear / Embedding layer."""
    if not type(module).__module__.startswith("peft.tuners."):
        return False
    base = getattr(module, "get_base_layer", None)
    return callable(base) and isinstance(base(), _PER_TOKEN_BASES)


def _set_on_instance(name: str, module: torch.nn.Module) -> dict[str, Any]:
    found = {}
    attributes = vars(module)
    for key in attributes.keys() - _MODULE_STATE:  # set difference: fast on large models
        value = attributes[key]
        if not callable(value) or isinstance(value, torch.nn.Module):
            continue
        if not callable(getattr(type(module), key, None)):
            continue
        hooks = _hooks(module) if key == "forward" else None
        if hooks is not None and all(_trusted_hook(h) for h in hooks):
            continue
        what = getattr(value, "__qualname__", type(value).__name__)
        if hooks is not None:
            what = "accelerate hooks " + ", ".join(type(h).__qualname__ for h in hooks)
        found[f"{key} set on the instance {name} ({what})"] = value if hooks is None else hooks
    return found


def _hooks(module: torch.nn.Module) -> tuple[Any, ...] | None:
    """The accelerate hooks around the class's own forward (device placement with
    ``device_map``), or None where ``forward`` was set otherwise."""
    hook, old = getattr(module, "_hf_hook", None), module.__dict__.get("_old_forward")
    if hook is None or not inspect.ismethod(old) or old.__func__ is not type(module).forward:
        return None
    return tuple(getattr(hook, "hooks", (hook,)))  # a SequentialHook holds several


def _trusted_hook(hook: Any) -> bool:
    """accelerate's own hooks move tensors between devices and leave the math alone."""
    return type(hook).__module__.startswith("accelerate.")
