# SPDX-License-Identifier: Apache-2.0
"""What ``analyze`` found: :class:`AnalysisResult`, its JSON form and its text report."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from energon_pack.algorithms import CarryOver, PackingResult
from energon_pack_tools._replay import PackSizeChoice

__all__ = ["FIRST_PACKS", "AnalysisResult", "BufferCost"]


class BufferCost(NamedTuple):
    """What one packing buffer size costs (per worker), estimated from measured means."""

    memory_bytes: float  #: documents held x mean bytes per encoded document
    first_pack_s: float  #: time to fill the buffer: documents x mean seconds per document
    restore_samples: int  #: samples energon re-reads (and re-encodes) on a restore


#: Packs whose document lengths :class:`AnalysisResult` keeps (``first_packs``, for the plot).
FIRST_PACKS = 24


@dataclass(frozen=True, kw_only=True)
class AnalysisResult(PackingResult):
    """What the loader did to one epoch (the :class:`PackingResult` figures, measured), and what
    the simulation predicts."""

    dataset: str
    dropped_empty: int  #: samples that encoded to zero tokens (dropped)
    #: positions of the emitted packs with a target (``labels != -100``): the tokens the loss
    #: averages over (SFT prompts, image placeholders and each document's last token have none)
    loss_tokens: int = 0
    #: samples energon's error handler skipped (a corrupt file, bad UTF-8, an encoder error)
    skipped: int = 0
    #: ``(key, reason)`` of the skipped samples (the most recent 1024)
    skipped_samples: list[tuple[str, str]] = field(default_factory=list)
    #: images with more than 8 bits per value (clipped to 8 by the processor: nearly white)
    high_bit_depth_images: int = 0
    #: ``(key, PIL mode)`` of those images (the most recent 1024)
    high_bit_depth_samples: list[tuple[str, str]] = field(default_factory=list)
    simulated_fill: float  #: ``simulate`` on the same lengths, same settings
    bound_fill: float  #: fill of ceil(tokens / pack_size) packs: no buffer does better
    target_fill: float
    recommended_buffer_size: int | None  #: smallest candidate reaching ``target_fill``
    buffer_sweep: dict[int, float]  #: candidate buffer size -> simulated fill
    carry_over_fill: float | None  #: simulated fill with carry-over when it was off
    #: smallest candidate buffer reaching ``target_fill`` with the default ``CarryOver()``
    carry_over_buffer_size: int | None = None
    lengths: list[int] = field(repr=False)
    #: ``(media tokens, images + videos)`` of each document of ``lengths``, same order
    #: (``None``: the documents carry no media)
    media_loads: list[tuple[int, int]] | None = field(default=None, repr=False)
    pack_fills: list[float] = field(repr=False)
    #: document (piece) lengths of the first :data:`FIRST_PACKS` packs, as the loader emitted them
    first_packs: list[list[int]] = field(default_factory=list, repr=False)
    #: image + video tokens of each emitted pack (``None``: the documents carry no media)
    pack_media_tokens: list[int] | None = field(default=None, repr=False)
    #: what the simulated figures could not model (media budgets with over-long documents)
    replay_note: str | None = None
    #: simulated fill, packs and tokens at a few pack sizes around ``pack_size`` (same
    #: lengths, buffer and policies; :data:`~energon_pack_tools._replay.PACK_SIZE_FACTORS`)
    pack_size_choices: dict[int, PackSizeChoice] = field(default_factory=dict)

    #: mean bytes an encoded document holds while buffered (tokens, loss mask, media), measured
    bytes_per_document: float = 0.0
    #: mean time to encode one sample (tokenize, process media), measured
    seconds_per_sample: float = 0.0

    def buffer_costs(self) -> dict[int, BufferCost]:
        """What each buffer of the sweep (and yours) costs, from the measured means: the
        buffer holds ``buffer`` documents (``memory_bytes``); the first pack waits for it to
        fill (``first_pack_s``); a restore re-reads and re-encodes its samples
        (``restore_samples``, in about the same time). Estimates: per worker, text lengths
        measured, pixels counted where the encoded document holds them (light media: bytes).

        Buffer 64 at 1,500 bytes and 2 ms per document: 96,000 bytes, 0.128 s, 64 samples.
        """
        sizes = sorted({*self.buffer_sweep, self.buffer_size})
        return {
            b: BufferCost(b * self.bytes_per_document, b * self.seconds_per_sample, b)
            for b in sizes
        }

    @property
    def loss_share(self) -> float:
        """Loss tokens / real tokens in packs (0.0 without tokens): 40 of 100 real tokens with
        a target (an SFT response) -> 0.4."""
        return self.loss_tokens / self.tokens if self.tokens else 0.0

    @property
    def media_tokens(self) -> int | None:
        """Image and video placeholder tokens in packs (``None``: no media documents)."""
        return None if self.pack_media_tokens is None else sum(self.pack_media_tokens)

    @property
    def text_tokens(self) -> int:
        """Real tokens in packs that are not media placeholders."""
        return self.tokens - (self.media_tokens or 0)

    def media_figures(self) -> dict[str, Any] | None:
        """Media and text tokens in total and per pack (mean, max), or ``None`` without media.

        Packs of 10 + 6 real tokens holding 4 and 0 media tokens -> ``media_tokens`` 4,
        ``text_tokens`` 12, per pack media mean 2.0 / max 4, text mean 6.0 / max 6.
        """
        per_pack = self.pack_media_tokens
        if per_pack is None:
            return None
        text = [round(f * self.pack_size) - m for f, m in zip(self.pack_fills, per_pack)]
        packs = max(len(per_pack), 1)
        return {
            "media_tokens": self.media_tokens,
            "text_tokens": self.text_tokens,
            "media_tokens_per_pack": {"mean": sum(per_pack) / packs, "max": max(per_pack or [0])},
            "text_tokens_per_pack": {"mean": sum(text) / packs, "max": max(text or [0])},
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the per-document lengths and per-pack fills)."""
        out: dict[str, Any] = super().to_dict()
        for name in ("lengths", "media_loads", "pack_fills", "first_packs", "pack_media_tokens"):
            out.pop(name)
        out["media"] = self.media_figures()
        out["buffer_sweep"] = {str(k): v for k, v in self.buffer_sweep.items()}
        out["loss_share"] = self.loss_share
        out["buffer_costs"] = {str(b): c._asdict() for b, c in self.buffer_costs().items()}
        out["pack_size_choices"] = {
            str(size): choice._asdict() for size, choice in self.pack_size_choices.items()
        }
        out["skipped_samples"] = [{"key": k, "reason": r} for k, r in self.skipped_samples]
        out["high_bit_depth_samples"] = [
            {"key": k, "mode": m} for k, m in self.high_bit_depth_samples
        ]
        return out

    def lengths_file(self) -> str:
        """``lengths`` as an ``energon-pack simulate`` lengths file: one document per line,
        ``length media_tokens media_items`` when the documents carry media, else ``length``.
        ``"512 256 1\n90 0 0\n"`` for an image document and a text one."""
        if self.media_loads is None:
            return "".join(f"{n}\n" for n in self.lengths)
        rows = zip(self.lengths, self.media_loads, strict=True)
        return "".join(f"{n} {t} {i}\n" for n, (t, i) in rows)

    def _buffer_cost_summary(self) -> str:
        """Your buffer and the recommended ones: memory held, time to fill (first pack and
        each restore re-read), from the measured means."""
        costs = self.buffer_costs()
        shown = [self.buffer_size]
        for best in (self.recommended_buffer_size, self.carry_over_buffer_size):
            if best is not None and best in costs and best not in shown:
                shown.append(best)
        parts = [
            f"{b}: {_size(costs[b].memory_bytes)} held, fills in {costs[b].first_pack_s:.2g} s"
            for b in shown
        ]
        return (
            "; ".join(parts)
            + f" (first pack and each restore, which re-reads the buffer; measured "
            f"{_size(self.bytes_per_document)} and {1e3 * self.seconds_per_sample:.2g} ms to "
            "encode per document, per worker)"
        )

    def lines(self) -> list[str]:
        """A human-readable report."""
        rec = (
            f"{self.recommended_buffer_size} (simulated fill "
            f"{self.buffer_sweep[self.recommended_buffer_size]:.2%} >= {self.target_fill:.2%})"
            if self.recommended_buffer_size is not None
            else f"none of {list(self.buffer_sweep)} reaches {self.target_fill:.2%}"
        )
        rows = [
            ("dataset", self.dataset),
            (
                "settings",
                f"pack {self.pack_size}, buffer {self.buffer_size}, {self.algorithm}, "
                f"overlong={self.overlong}, carry_over={'on' if self.carry_over else 'off'}",
            ),
            (
                "fill",
                f"{self.fill:.2%}   (simulate {self.simulated_fill:.2%}, "
                f"bound {self.bound_fill:.2%})",
            ),
            ("packs", f"{self.packs}   ({self.tokens:,} tokens)"),
            (
                "documents",
                f"{self.samples_in} in -> {self.samples_out} pieces in packs "
                f"({self.dropped_empty} empty dropped)",
            ),
            ("pieces/pack", f"{self.documents_per_pack:.2f}"),
            (
                "loss tokens",
                f"{self.loss_tokens:,} = {self.loss_share:.2%} of real tokens (have a target)",
            ),
            (
                "over-long",
                f"truncated {self.truncated_overlong}, split {self.split_overlong}, "
                f"dropped {self.dropped_overlong}",
            ),
            *(
                [("over media budget", f"dropped {self.dropped_over_budget}")]
                if self.dropped_over_budget
                else []
            ),
            ("lengths", _length_summary(self.lengths, self.pack_size)),
        ]
        media = self.media_figures()
        if media is not None:
            m, t = media["media_tokens_per_pack"], media["text_tokens_per_pack"]
            rows.append(
                (
                    "media / text",
                    f"{media['media_tokens']:,} media + {media['text_tokens']:,} text tokens; "
                    f"per pack media {m['mean']:.1f} (max {m['max']}), "
                    f"text {t['mean']:.1f} (max {t['max']})",
                )
            )
        if self.skipped:
            rows.append(("skipped", _skipped_summary(self.skipped, self.skipped_samples)))
        if self.high_bit_depth_images:
            n, shown = self.high_bit_depth_images, self.high_bit_depth_samples[:3]
            rows.append(
                (
                    "high bit depth",
                    f"{n} image(s) with more than 8 bits per value ("
                    + ", ".join(f"{k} {m}" for k, m in shown)
                    + (", ..." if n > 3 else "")
                    + "): the processor clips them to 8 bits (nearly white); convert the "
                    "dataset's images to 8 bits",
                )
            )
        if self.carry_over_fill is not None:
            rows.append(
                (
                    "carry-over",
                    f"{self.carry_over_fill:.2%} at buffer {self.buffer_size} with --carry-over "
                    f"(simulated; {self.fill:.2%} without)",
                )
            )
        if self.pack_size_choices:
            rows.append(
                ("pack sizes", _pack_size_summary(self.pack_size_choices, self.buffer_size))
            )
        rows.append(("recommended buffer", rec))
        policy, best = CarryOver(), self.carry_over_buffer_size
        reach = f"buffer {best}" if best else f"no candidate buffer reaches {self.target_fill:.2%}"
        rows.append(
            (
                "or with carry-over",
                f"{reach} with --carry-over (defaults: min_fill {policy.min_fill}, "
                f"max_carry_packs {policy.max_carry_packs:g}, max_age {policy.max_age}: a "
                f"document waits at most {policy.max_age + 1} buffers)",
            )
        )
        if self.bytes_per_document:
            rows.append(("buffer costs", self._buffer_cost_summary()))
        if self.replay_note is not None:
            rows.append(("note", self.replay_note))
        return [f"{name:<19} {value}" for name, value in rows]


def _size(n: float) -> str:
    """``_size(950) == "950 B"``, ``_size(3_300_000) == "3.3 MB"``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _pack_size_summary(choices: dict[int, PackSizeChoice], buffer_size: int) -> str:
    """``256: 93.10% in 1,351 packs, 512: 88.53% in 715, ... (simulated, buffer 16)``."""
    shown = [
        f"{size}: {c.fill:.2%} in {c.packs:,}" + (" packs" if i == 0 else "")
        for i, (size, c) in enumerate(choices.items())
    ]
    return ", ".join(shown) + f" (simulated, buffer {buffer_size})"


def _skipped_summary(count: int, samples: Sequence[tuple[str, str]]) -> str:
    """``2 samples failed and were skipped: 000003 (OSError: ...), 000007 (...)``."""
    shown = ", ".join(f"{k} ({r})" for k, r in samples[:3])
    more = f", ... ({count - 3} more in --json)" if count > 3 else ""
    return f"{count} sample(s) failed to load or encode and were skipped: {shown}{more}"


def _length_summary(lengths: Sequence[int], pack_size: int) -> str:
    if not lengths:
        return "-"
    ordered = sorted(lengths)
    over = sum(n > pack_size for n in ordered)
    median = median_length(ordered)
    return f"min {ordered[0]}, median {median}, max {ordered[-1]}, {over} longer than the pack"


def median_length(lengths: Sequence[int]) -> str:
    """The median document length as the report and the plot print it: the mean of the two
    middle lengths for an even count (``[1, 2, 4, 9]`` -> ``"3"``, ``[1, 2]`` -> ``"1.5"``)."""
    return f"{statistics.median(lengths):g}"
