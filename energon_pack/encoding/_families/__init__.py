# SPDX-License-Identifier: Apache-2.0
"""VLM processor families: one module per family behind :class:`VisionFamily`, registered by
the exact processor classes it serves (``_registry.FAMILIES``).

Per image the encoders, light buffers and media budgets need its pixel tensor, a ``(3,)`` grid
whose product is the number of pixel items (rows packs and cuts slice) and its placeholder
tokens; each family gives them from the processor, and from the image size alone where its rule
is known. :func:`vision_family` looks the family up: patch grids (Qwen2/2.5/3-VL), tiles
(InternVL), images (Gemma 3, PaliGemma), split tiles (Idefics3, SmolVLM), anyres patches
(LLaVA-NeXT, -OneVision), GLM's patch grids (GLM-4.1V, -4.5V, -4.6V), Ernie-4.5-VL's (with
``moe_mm_token_type_ids``), HunYuan-VL's (a newline token per row, XD-RoPE), PaddleOCR-VL's (whole patches); any other processor class is refused by name. Layouts per family:
docs/howto/conversations.md; adding one: docs/howto/add-a-family.md.
"""

from energon_pack.encoding._families._ernie45_vl import ErniePatchGrids
from energon_pack.encoding._families._gemma3 import Images
from energon_pack.encoding._families._glm4v import Glm4vPatchGrids, Glm46vPatchGrids
from energon_pack.encoding._families._hunyuan_vl import RowNewlineGrids
from energon_pack.encoding._families._idefics3 import SmolVLMTiles, SplitTiles
from energon_pack.encoding._families._interface import StackedItems, VisionFamily
from energon_pack.encoding._families._internvl import Tiles
from energon_pack.encoding._families._llava_next import Anyres, AnyresDocuments
from energon_pack.encoding._families._paddleocr_vl import WholePatchGrids
from energon_pack.encoding._families._paligemma import PrefixImages
from energon_pack.encoding._families._qwen_vl import PatchGrids
from energon_pack.encoding._families._registry import (
    ADD_A_FAMILY,
    FAMILIES,
    check_mrope,
    family_for,
    transformers_class,
    video_families,
    vision_family,
)

__all__ = [
    "ADD_A_FAMILY",
    "Anyres",
    "AnyresDocuments",
    "ErniePatchGrids",
    "FAMILIES",
    "Glm4vPatchGrids",
    "Glm46vPatchGrids",
    "Images",
    "PatchGrids",
    "PrefixImages",
    "RowNewlineGrids",
    "SmolVLMTiles",
    "SplitTiles",
    "StackedItems",
    "Tiles",
    "VisionFamily",
    "WholePatchGrids",
    "check_mrope",
    "family_for",
    "transformers_class",
    "video_families",
    "vision_family",
]
