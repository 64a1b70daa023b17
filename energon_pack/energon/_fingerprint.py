# SPDX-License-Identifier: Apache-2.0
"""The configuration fingerprint a :class:`ResumeGuard` saves and checks: everything that shapes
packs, flattened to ``{"name": "value"}`` strings, so that a restore can name what changed
(``packing.pack_size: 64 -> 48``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import json
from typing import Any

__all__ = ["fingerprint"]


def fingerprint(**parts: Any) -> dict[str, str]:
    """Flat ``{"name": "value"}`` of everything that shapes packs, for :class:`ResumeGuard`.

    Each keyword is one part: scalars as they are, dataclasses and plain objects by their public
    fields (``packing.pack_size``), tokenizers by class, a digest of the vocabulary and one of
    each section of their serialized form and chat template (``tok.normalizer``), processors by class and a digest of ``to_dict()``. Example:
    ``fingerprint(num_workers=2, packing=PackingConfig(pack_size=64))`` ->
    ``{"num_workers": "2", "packing.pack_size": "64", "packing.algorithm": ..., ...}``.
    """
    out: dict[str, str] = {}
    for name, value in parts.items():
        _flatten(name, value, out, depth=0)
    return out


#: Attributes that are not configuration (run records; ``config`` is its own part).
_SKIP = frozenset(
    {"config", "stats", "selections", "light_fallbacks", "log_every", "resume_accept_changes"}
)


def _flatten(name: str, value: Any, out: dict[str, str], depth: int) -> None:
    if isinstance(value, enum.Enum):
        out[name] = repr(value.value)
    elif value is None or isinstance(value, (bool, int, float, str)):
        out[name] = repr(value)
    elif isinstance(value, (list, tuple, frozenset, set)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        out[name] = repr([_scalar(v) for v in items])
    elif hasattr(value, "get_vocab"):  # a tokenizer
        _tokenizer(name, value, out)
    elif hasattr(value, "to_dict") and not dataclasses.is_dataclass(value):  # a processor
        config = json.dumps(value.to_dict(), sort_keys=True, default=repr).encode()
        out[name] = f"{type(value).__name__}({_digest(config)})"
    elif depth < 3 and (dataclasses.is_dataclass(value) or hasattr(value, "__dict__")):
        out[name] = type(value).__qualname__
        fields = (
            {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            if dataclasses.is_dataclass(value)
            else vars(value)
        )
        for key, inner in fields.items():
            if not key.startswith("_") and key not in _SKIP and not inspect.isroutine(inner):
                _flatten(f"{name}.{key}", inner, out, depth + 1)
    else:
        out[name] = type(value).__qualname__


#: Sections of a fast tokenizer's serialized form (``backend_tokenizer.to_str()``) that shape
#: tokens; ``truncation`` and ``padding`` are call-time settings that a call may leave behind.
_TOKENIZER_SECTIONS = ("normalizer", "pre_tokenizer", "model", "post_processor", "added_tokens")


def _tokenizer(name: str, tok: Any, out: dict[str, str]) -> None:
    """A tokenizer by class and vocabulary (``name``), each section of its full serialized form
    (``name.normalizer``, ``name.pre_tokenizer``, ``name.model`` (merges too),
    ``name.post_processor``, ``name.added_tokens``), its special tokens and chat template."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        out.update(_fast_tokenizer(name, tok, backend.to_str()))
    else:  # a slow (Python) tokenizer: its added tokens; the rest is its class and vocabulary
        out[name] = _vocabulary(tok)
        added = getattr(tok, "added_tokens_decoder", {})
        out[f"{name}.added_tokens"] = _digest_of({str(k): str(v) for k, v in added.items()})
    out[f"{name}.special_tokens"] = _digest_of(getattr(tok, "special_tokens_map", None))
    out[f"{name}.chat_template"] = _digest_of(getattr(tok, "chat_template", None))


#: Entries of fast tokenizers already digested in this process, by class and serialized form:
#: a loader built again on the same tokenizer hashes ``to_str()`` (5 ms for a 30k vocabulary)
#: instead of sorting and printing the vocabulary and every section again (100-250 ms).
_FAST_SEEN: dict[tuple[type, str, str], dict[str, str]] = {}
_FAST_SEEN_MAX = 16


def _fast_tokenizer(name: str, tok: Any, serialized: str) -> dict[str, str]:
    """``name`` and ``name.<section>`` of a fast tokenizer whose backend serializes to
    ``serialized``. Its vocabulary is the backend's (``get_vocab`` reads it from there), so
    the serialized form and the class decide every entry, and a tokenizer changed in place
    serializes differently and is digested anew."""
    key = (type(tok), name, hashlib.sha1(serialized.encode()).hexdigest())
    entries = _FAST_SEEN.get(key)
    if entries is None:
        sections = json.loads(serialized)
        entries = {name: _vocabulary(tok)}
        for section in _TOKENIZER_SECTIONS:
            entries[f"{name}.{section}"] = _digest_of(sections.get(section))
        if len(_FAST_SEEN) >= _FAST_SEEN_MAX:
            _FAST_SEEN.pop(next(iter(_FAST_SEEN)))
        _FAST_SEEN[key] = entries
    return entries


def _vocabulary(tok: Any) -> str:
    """``"Class(N tokens, digest)"`` of the vocabulary (not the path: a copied tokenizer is the
    same)."""
    vocab = sorted(tok.get_vocab().items())
    return f"{type(tok).__name__}({len(vocab)} tokens, {_digest(repr(vocab).encode())})"


def _digest_of(value: Any) -> str:
    """``None`` or a digest of ``value``'s JSON form."""
    if value is None:
        return "None"
    return _digest(json.dumps(value, sort_keys=True, default=repr).encode())


def _scalar(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)


def _digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:12]
