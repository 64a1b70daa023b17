# SPDX-License-Identifier: Apache-2.0
"""Which non-attention layers packing can serve, and the refusal, by mechanism, of the rest.

A layer that carries a state along the row (gated delta-net, short convolution, Mamba) keeps
the documents of a packed row apart only if transformers hands its kernel the borders. In
transformers 5.24 gated delta-net layers (Qwen3-Next, Qwen3.5, OLMo-hybrid) pass
``cu_seq_lens_q`` to fla's ``chunk_gated_delta_rule`` (as ``cu_seqlens``) and their ``**kwargs``
(so ``seq_idx``) to causal-conv1d's ``causal_conv1d_fn``; LFM2's short convolutions pass
``**kwargs`` to ``causal_conv1d_fn``. Those layers are candidates: ``check_model``'s experiment
runs them through transformers' route with reference kernels (``_linear_reference.py``) and
accepts them only when packed equals alone; so are Mamba2 mixers (Bamba, GraniteMoE-hybrid,
Falcon-H1, Zamba2, Nemotron-H), which pass ``seq_idx`` to mamba-ssm's scans. Mamba (v1) layers
(their ``selective_scan_fn`` takes no border), layers whose kernels energon-pack has no
reference for (Kimi's ``chunk_kda``), or that call no kernel at all, are refused here.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

from energon_pack.attention._linear_reference import DECODE_ONLY, KERNELS, kernel_functions

__all__ = ["FLATTENED_MULTIMODAL", "NO_BORDER_INPUT", "WITH_ATTENTION", "hybrid_layers", "refusal"]

#: Module globals of transformers' Mamba (v1) mixers -> mamba-ssm's kernel, which has no input
#: for document borders (Jamba, Zamba, Mamba, FalconMamba).
NO_BORDER_INPUT = {"mamba_selective_scan": "selective_scan_fn", "mamba_inner_fn": "mamba_inner_fn"}
#: State layer types that hold a full-attention block too (Falcon-H1's attention beside its
#: Mamba2 mixer, Zamba2's shared attention block): their models read the
#: ``"full_attention"`` mask of the mapping for them.
WITH_ATTENTION = ("hybrid",)

#: Multimodal hybrids whose flattened route (the ``(1, B*L)`` row, ``(4, 1, B*L)`` text and
#: mRoPE positions, images and videos) is proven packed-equals-alone by energon-pack's tests
#: (``tests/task_encoders/test_hybrid_vlm_proof.py``); their text model is checked as any
#: hybrid's. Others are refused: their vision inputs were never run through this layout.
FLATTENED_MULTIMODAL = ("qwen3_5", "qwen3_5_moe")


def refusal(types: list[str], why: str, remedy: str | None = None) -> Any:
    """A :class:`PackingNotExactError` for the non-attention layer ``types``."""
    from energon_pack.attention._errors import PackingNotExactError

    return PackingNotExactError(
        f"non-attention layer types {types} in config.layer_types",
        why,
        remedy or "train this model unpacked (one document per row, right padding)",
    )


def _version() -> str:
    return importlib.import_module("transformers").__version__


def _model_class(config: Any) -> type | None:
    auto = importlib.import_module("transformers.models.auto.modeling_auto")
    try:
        return auto.MODEL_MAPPING[type(config)]
    except KeyError:
        return None


def _reads_borders(module_source: str) -> bool:
    return any(n in module_source for n in ("seq_idx", "cu_seq_lens", "cu_seqlens"))


def hybrid_layers(outer: Any, config: Any, types: list[str]) -> tuple[str, ...]:
    """The non-attention layer ``types`` of ``config`` (outer: the model's own config), when
    transformers routes all of them to kernels energon-pack can verify; else refuses."""
    if not types:
        return ()
    if outer is not config and getattr(outer, "model_type", "") not in FLATTENED_MULTIMODAL:
        raise refusal(
            types,
            f"{getattr(outer, 'model_type', type(outer).__name__)} is a multimodal hybrid: its "
            "linear layers need the batch flattened to one (1, B*L) row with seq_idx and "
            "cu_seq_lens, and energon-pack has verified that layout with the position rows and "
            f"the vision inputs only for {', '.join(FLATTENED_MULTIMODAL)}",
            "train it unpacked; its text model alone (ForCausalLM) packs",
        )
    cls = _model_class(config)
    module = sys.modules.get(cls.__module__) if cls else None
    kernels = kernel_functions(cls) if cls else {}
    source = inspect.getsource(module) if module else ""
    unknown = sorted(n for n in kernels if n not in KERNELS and n not in DECODE_ONLY)
    where = f"{cls.__module__.rsplit('.', 1)[-1]}.py of transformers {_version()}" if cls else ""
    no_input = sorted(n for n in unknown if n in NO_BORDER_INPUT)
    if no_input:
        raise refusal(
            types,
            f"these are Mamba (v1) layers: transformers calls {', '.join(no_input)} in {where}, "
            f"and mamba-ssm's {', '.join(NO_BORDER_INPUT[n] for n in no_input)} have no "
            "seq_idx or cu_seqlens input, so no kernel can reset their state at a document border",
        )
    if unknown:
        raise refusal(
            types,
            f"these layers carry a state along the row through kernels energon-pack has no "
            f"reference of ({', '.join(unknown)} in {where}), so it cannot verify that "
            "transformers hands them the document borders (seq_idx / cu_seqlens) and that "
            "they reset at them",
        )
    if not any(n in KERNELS for n in kernels):
        reads = "reads" if _reads_borders(source) else "reads neither seq_idx nor cu_seq_lens"
        raise refusal(
            types,
            f"these layers carry a state along the row in PyTorch code that takes no "
            f"document border ({where} {reads}), so each document starts from the previous "
            "document's state"
            if reads != "reads"
            else f"these layers carry a state along the row in PyTorch code ({where}) that "
            "energon-pack cannot verify",
        )
    return tuple(types)
