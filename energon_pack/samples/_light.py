# SPDX-License-Identifier: Apache-2.0
"""Light documents: what a light media buffer holds. Tokens, spans and grids are planned from
the media headers; pixel fields are a *row map* (``(rows, 1)`` int32: each future row's item)
and the media stay undecoded until the encoder's ``materialize``. See docs/howto/light-media.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self

from megatron.energon import edataclass

from energon_pack.samples._encoded import EncodedCaptioningSample, EncodedMultimodalSample

__all__ = ["LightCaptioningDocument", "LightMultimodalDocument"]


class _Light:
    """``planned`` / ``materialized``: to and from the base document type (the first base)."""

    __slots__ = ()

    @classmethod
    def planned(cls, doc: Any, **media: Any) -> Self:
        """``doc`` (planned: row maps as pixels) as this light type, keeping ``media``."""
        return cls(**_planned_fields(doc), **media)

    def materialized(self, **pixels: Any) -> Any:
        """This document as its base document type, with the processed ``pixels`` fields."""
        return type(self).__bases__[0](**{**_planned_fields(self), **pixels})


@edataclass
class LightCaptioningDocument(EncodedCaptioningSample, _Light):
    """A captioning document planned from its image header; ``pixel_values`` is a row map."""

    ready_to_pack: ClassVar[bool] = False

    #: The sample's images as given (encoded bytes, PIL images or tensors), not decoded.
    images: list[Any]


@edataclass
class LightMultimodalDocument(EncodedMultimodalSample, _Light):
    """A multimodal document planned from its media headers; pixel fields are row maps."""

    ready_to_pack: ClassVar[bool] = False

    #: The sample's images as given, not decoded.
    images: list[Any]
    #: The sample's videos as frame lists, not decoded.
    videos: list[list[Any]]


def _planned_fields(doc: Any) -> dict[str, Any]:
    skip = ("images", "videos")
    return {f.name: getattr(doc, f.name) for f in dataclasses.fields(doc) if f.name not in skip}
