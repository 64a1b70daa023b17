# SPDX-License-Identifier: Apache-2.0
"""The registry of VLM families, keyed by exact transformers processor classes.

:func:`vision_family` looks up the class of the processor (and of its image processor) in
:data:`FAMILIES`; nothing is guessed from attributes. A processor whose class no family lists
is refused naming it and docs/howto/add-a-family.md. A class defined outside transformers (a
user's subclass) is looked up as the transformers class it derives from::

    vision_family(Gemma3Processor(...))          -> Images (gemma3)
    vision_family(Qwen2VLImageProcessorPil())    -> PatchGrids (qwen2-vl)
    vision_family(ShieldGemma2Processor(...))    -> ValueError: ShieldGemma2Processor is not ...
"""

from __future__ import annotations

from typing import Any

from energon_pack.encoding._families._ernie45_vl import ErniePatchGrids
from energon_pack.encoding._families._gemma3 import Images
from energon_pack.encoding._families._glm4v import Glm4vPatchGrids, Glm46vPatchGrids
from energon_pack.encoding._families._hunyuan_vl import RowNewlineGrids
from energon_pack.encoding._families._idefics3 import SmolVLMTiles, SplitTiles
from energon_pack.encoding._families._interface import VisionFamily, transformers_class
from energon_pack.encoding._families._internvl import Tiles
from energon_pack.encoding._families._llava_next import Anyres, AnyresDocuments
from energon_pack.encoding._families._paddleocr_vl import WholePatchGrids
from energon_pack.encoding._families._paligemma import PrefixImages
from energon_pack.encoding._families._qwen_vl import PatchGrids

__all__ = [
    "ADD_A_FAMILY",
    "FAMILIES",
    "check_mrope",
    "family_for",
    "transformers_class",
    "video_families",
    "vision_family",
]

#: Every registered family: one line each (docs/howto/add-a-family.md).
FAMILIES: tuple[type[VisionFamily], ...] = (
    PatchGrids,
    Tiles,
    Images,
    PrefixImages,
    SplitTiles,
    SmolVLMTiles,
    Anyres,
    AnyresDocuments,
    Glm4vPatchGrids,
    Glm46vPatchGrids,
    ErniePatchGrids,
    RowNewlineGrids,
    WholePatchGrids,
)
#: The page that says how to add a family (named in every refusal).
ADD_A_FAMILY = "docs/howto/add-a-family.md"
_GEMMA4 = (
    "Gemma 4 pads each image to a fixed patch budget with its own image_position_ids, counts "
    "its soft tokens per aspect ratio, and its models with use_bidirectional_attention='vision' "
    "let image tokens attend both ways in sliding layers only; no family lays that out yet"
)
#: Unregistered classes whose refusal also says why their layout is not served.
REASONS = dict.fromkeys(
    ("Gemma4Processor", "Gemma4ImageProcessor", "Gemma4ImageProcessorPil"), _GEMMA4
)


def video_families() -> list[str]:
    """The names of the registered families that take videos (``["qwen2-vl"]``)."""
    return [f.name for f in FAMILIES if f.videos]


def _served() -> str:
    return "; ".join(
        f"{f.name}: {', '.join(f.processors + f.image_processors * (not f.needs_processor))}"
        for f in FAMILIES
    )


def _refuse(name: str, what: str = "") -> ValueError:
    reason = f" ({REASONS[name]})" if name in REASONS else ""
    return ValueError(
        f"{name}{what} is not a registered VLM processor class, so packing cannot say how its "
        f"images become tokens and pixels{reason} (registered: {_served()}). Adding a family is "
        f"one module and one registry line: see {ADD_A_FAMILY}."
    )


def vision_family(processor: Any) -> VisionFamily:
    """The registered family of a transformers processor or image processor, built from it.

    ``processor`` is a whole processor, an image processor (families that do not need the
    whole processor) or what ``energon-pack analyze`` loads from a directory (an object with
    ``image_processor``, ``image_seq_length`` and ``processor_class``).

    Raises:
        ValueError: see :func:`family_for`.
    """
    image_processor = getattr(processor, "image_processor", processor)
    image_name = transformers_class(image_processor) or type(image_processor).__name__
    proc_name = None
    if image_processor is not processor:
        proc_name = getattr(processor, "processor_class", None) or transformers_class(processor)
        proc_name = proc_name or type(processor).__name__
    return family_for(proc_name, image_name).from_processor(processor, image_processor)


def family_for(processor: str | None, image_processor: str) -> type[VisionFamily]:
    """The family registered for these class names (``processor`` None: an image processor
    alone): ``family_for("Gemma3Processor", "Gemma3ImageProcessorPil") is Images``.

    Raises:
        ValueError: an unregistered processor or image processor class (named, with the page
            on adding a family), a registered image processor alone where its family needs
            the whole processor, or a pair of classes no family lists together.
    """
    if processor is not None and not any(processor in f.processors for f in FAMILIES):
        raise _refuse(processor)
    if not any(image_processor in f.image_processors for f in FAMILIES):
        raise _refuse(image_processor, " (an image processor)")
    for family in FAMILIES:
        if image_processor not in family.image_processors:
            continue
        if processor is None and family.needs_processor:
            raise ValueError(
                f"{image_processor}: an image processor alone does not say how many tokens an "
                f"image is; pass the whole {family.processors[0]} (AutoProcessor), whose own "
                "rule gives them."
            )
        if processor is None or processor in family.processors:
            return family
    raise ValueError(
        f"{processor} with a {image_processor}: no registered family pairs these classes (see "
        f"{ADD_A_FAMILY}); pass the processor with its own image processor class."
    )


def check_mrope(family: VisionFamily, mrope: bool) -> None:
    """Raise ValueError when ``mrope=True`` is asked of a family whose model has 1-D positions."""
    if mrope and not family.mrope:
        raise ValueError(
            f"mrope=True, but {family.name} models take 1-D positions (restarting per "
            "document, as packs give them); pass mrope=False."
        )
