# SPDX-License-Identifier: Apache-2.0
"""Light documents: what a light media buffer holds instead of processed pixels.

A light document is an encoded document whose tokens, loss mask, spans and grids are final
(planned from the media headers, see :mod:`energon_pack.encoding`), whose ``pixel_values``
(and ``pixel_values_videos``) are a *row map* (``(rows, 1)`` int32: the index of the media item
each future pixel row comes from), and which keeps the media as the sample gave them (encoded
bytes, usually). The encoder's ``postencode`` turns it into the ordinary document with pixels,
for the members of a selected pack only. A 1 MP JPEG document holds ~200 KB of bytes and a
5,184-row map (20 KB) instead of 24 MB of float32 patches::

    LightCaptioningDocument(tokens=[<s> <img>*4 a cat </s>], image_grid_thw=[[1, 4, 4]],
                            pixel_values=[[0]]*16, images=[b"\\xff\\xd8..."])
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar

from megatron.energon import edataclass

from energon_pack.samples._encoded import EncodedCaptioningSample
from energon_pack.samples._multimodal import EncodedMultimodalSample

T_light = TypeVar("T_light")

__all__ = [
    "LightCaptioningDocument",
    "LightMultimodalDocument",
    "light_document",
    "materialized",
]


@edataclass
class LightCaptioningDocument(EncodedCaptioningSample):
    """A captioning document planned from its image header; ``pixel_values`` is a row map."""

    ready_to_pack: ClassVar[bool] = False

    #: The sample's images as given (encoded bytes, PIL images or tensors), not decoded.
    images: list[Any]


@edataclass
class LightMultimodalDocument(EncodedMultimodalSample):
    """A multimodal document planned from its media headers; pixel fields are row maps."""

    ready_to_pack: ClassVar[bool] = False

    #: The sample's images as given, not decoded.
    images: list[Any]
    #: The sample's videos as frame lists, not decoded.
    videos: list[list[Any]]


#: The media fields a light document adds to its base type.
_MEDIA_FIELDS = ("images", "videos")


def _fields(doc: Any) -> dict[str, Any]:
    return {
        f.name: getattr(doc, f.name) for f in dataclasses.fields(doc) if f.name not in _MEDIA_FIELDS
    }


def light_document(cls: type[T_light], doc: Any, **media: Any) -> T_light:
    """``doc`` (planned: row maps as pixels) as a light ``cls`` that keeps ``media``."""
    return cls(**_fields(doc), **media)


def materialized(doc: Any, **pixels: Any) -> Any:
    """The light ``doc`` as its base document type, with the processed ``pixels`` fields."""
    base = type(doc).__bases__[0]
    return base(**{**_fields(doc), **pixels})
