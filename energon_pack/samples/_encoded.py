# SPDX-License-Identifier: Apache-2.0
"""Encoded documents: what a task encoder's ``encode_sample`` returns, ready to be packed.

One document is its token ids and a loss mask that says which tokens are prediction targets.
Example, a prompt/answer pair where only the answer is trained on::

    tokens     <s>  Q   ?   A   !  </s>
    loss_mask   F   F   F   T   T   T      (tokens[0] is never a target, whatever the mask says)

A captioning document adds the image processor's output and the ``[start, end)`` span of each
image's placeholder tokens in ``tokens`` (``image_grid_thw`` in the Qwen2-VL convention).
"""

from __future__ import annotations

import torch
from megatron.energon import Sample, edataclass

__all__ = ["EncodedCaptioningSample", "EncodedSample"]


@edataclass
class EncodedSample(Sample):
    """One tokenized document."""

    #: (n,) int64 token ids of the document (BOS/EOS included).
    tokens: torch.Tensor
    #: (n,) bool; True where tokens[i] is a prediction target (may be predicted from position
    #: i-1). tokens[0] is never predicted whatever loss_mask[0] says.
    loss_mask: torch.Tensor

    @property
    def length(self) -> int:
        """Number of tokens of the document."""
        return int(self.tokens.shape[0])


@edataclass
class EncodedCaptioningSample(EncodedSample):
    """One tokenized document with images."""

    #: (num_patches, patch_dim) float32, image processor output (all images of this sample).
    pixel_values: torch.Tensor
    #: (num_images, 3) int64 (t, h, w) in patches before the spatial merge (Qwen2-VL convention).
    image_grid_thw: torch.Tensor
    #: (num_images, 2) int64 [start, end) of each image's placeholder tokens in ``tokens``.
    image_spans: torch.Tensor
