# SPDX-License-Identifier: Apache-2.0
"""The error every refusal raises: packing would change the model's forward pass."""

from __future__ import annotations

__all__ = ["PackingNotExactError"]


class PackingNotExactError(ValueError):
    """Packing would change this model's forward pass; the message says why and what to do."""

    def __init__(self, feature: str, why: str, remedy: str) -> None:
        #: The model feature at fault, e.g. ``"LongRoPE"``.
        self.feature = feature
        #: Why packing changes the forward pass, and what to do instead.
        self.why, self.remedy = why, remedy
        super().__init__(f"packing is not exact for {feature}: {why}. What to do: {remedy}")
