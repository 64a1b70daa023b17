# SPDX-License-Identifier: Apache-2.0
"""The one mapping from member type to container type: pack types by document type, batch types
by pack type. A container class names its member type (``PackedCaptioningSample.document_type``,
``PackedTextBatch.pack_type``) and so registers itself; a lookup takes the nearest registered
base, so a pack subclass that only adds fields (``finalize_pack``) collates as its base.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["TypeRegistry"]


class TypeRegistry:
    """Container types by member type (``"document"`` or ``"pack"``, for messages)."""

    def __init__(self, member: str) -> None:
        self.member = member
        self._types: dict[type, type] = {}
        # (container, member's type, member_type) -> fits; checks run once per pack and batch
        self._fits: dict[tuple[type, type, type], bool] = {}

    def register(self, member_type: type, container: type) -> None:
        """``container`` holds ``member_type`` (the latest registration wins)."""
        self._types[member_type] = container
        self._fits.clear()

    def lookup(self, member_type: type) -> type | None:
        """The container registered for ``member_type`` or its nearest base, or None."""
        return next((self._types[t] for t in member_type.__mro__ if t in self._types), None)

    def check(self, container: type, members: Iterable[Any], member_type: type) -> None:
        """Raise ValueError unless each member is a ``member_type`` whose own registered
        container is ``container`` or a base of it (so no field would be lost)."""
        members = list(members)
        for kind in dict.fromkeys(map(type, members)):  # each member type once, in order
            if self._fits.get((container, kind, member_type)):
                continue
            m = next(m for m in members if type(m) is kind)
            own = self.lookup(kind)
            if own is not None and isinstance(m, member_type) and issubclass(container, own):
                self._fits[container, kind, member_type] = True
                continue
            key = getattr(m, "__key__", m)
            wanted = f"; it belongs in a {own.__name__}" if own is not None else ""
            raise ValueError(
                f"{self.member} {key!r} is a {type(m).__name__}: a {container.__name__} holds "
                f"{member_type.__name__}s and would lose its fields{wanted}. Do not mix "
                f"{self.member} types in one {container.__name__}."
            )
