# SPDX-License-Identifier: Apache-2.0
"""Light documents: what a light media buffer holds. Tokens, spans and grids are planned from
the media headers; pixel fields are a *row map* (``(rows, 1)`` int32: each future row's item)
and the media stay undecoded until the encoder's ``materialize``. See docs/howto/light-media.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self

from megatron.energon import edataclass

from energon_pack.samples._encoded import EncodedMultimodalSample

__all__ = ["LightMultimodalDocument"]


@edataclass
class LightMultimodalDocument(EncodedMultimodalSample):
    """A multimodal document planned from its media headers; pixel fields are row maps."""

    ready_to_pack: ClassVar[bool] = False

    #: The sample's images as given (encoded bytes, PIL images or tensors), not decoded.
    images: list[Any]
    #: The sample's videos as frame lists, not decoded.
    videos: list[list[Any]]

    @classmethod
    def planned(cls, doc: Any, **media: Any) -> Self:
        """``doc`` (planned: row maps as pixels) as a light document, keeping ``media``."""
        return cls(**_planned_fields(doc), **media)

    def materialized(self, **pixels: Any) -> EncodedMultimodalSample:
        """This document as an :class:`EncodedMultimodalSample`, with the processed ``pixels``."""
        return EncodedMultimodalSample(**{**_planned_fields(self), **pixels})


def _planned_fields(doc: Any) -> dict[str, Any]:
    skip = ("images", "videos")
    return {f.name: getattr(doc, f.name) for f in dataclasses.fields(doc) if f.name not in skip}
