# SPDX-License-Identifier: Apache-2.0
"""``PackingTaskEncoder``: the generic energon task encoder that packs; a task implements
:meth:`~PackingTaskEncoder.encode_document` only. The base class owns energon's packing hooks:
``encode_sample`` (seeded; drops empty documents, applies the over-long policy),
``select_samples_to_pack`` (the configured algorithm; only partitions),
``pack_selected_samples`` (``pack_documents``, then :meth:`~PackingTaskEncoder.finalize_pack`)
and ``batch`` (``collate_packs``, rows padded to ``pack_size``). Media encoders override
:meth:`~PackingTaskEncoder.materialize` for light media buffers. See docs/howto/custom-task.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from megatron.energon import TaskEncoder, stateless

from energon_pack.algorithms import MediaLoad, PackingSpec, pack_lengths
from energon_pack.encoding import (
    PackingStats,
    apply_overlong_policy,
    resolve_light_media,
    warn_if_buffer_too_small,
)
from energon_pack.energon import (
    SeedSource,
    build_carry_over_dataset,
    build_postencode_packing_dataset,
    building_datasets,
    encode_map_dataset,
    group_of,
    guard_reader,
    restoring_item,
    resumable,
    seeded_stateless,
)
from energon_pack.samples import (
    EncodedSample,
    PackedTextSample,
    PackingCounts,
    collate_packs,
    pack_documents,
)
from energon_pack.task_encoders._blend_size import (
    blend_description,
    blending,
    dataset_counts,
    raw_sample_size,
)
from energon_pack.task_encoders._packing_groups import (
    PackingPolicy,
    grouped_train_datasets,
    policy_fingerprint,
)

__all__ = ["PackingConfig", "PackingTaskEncoder"]

T_sample = TypeVar("T_sample")


@dataclass(frozen=True, kw_only=True)
class PackingConfig(PackingSpec):
    """A :class:`~energon_pack.algorithms.PackingSpec` (every packing knob, its defaults and
    validation) plus what only the encoders need:
    ``PackingConfig(pack_size=4096, overlong="split", pad_token_id=0)``."""

    #: Token id used to pad documents (alignment) and batch rows.
    pad_token_id: int = 0
    #: Log a stats summary every this many packs per process (0: never).
    log_every: int = 1000

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.log_every < 0:
            raise ValueError(f"log_every={self.log_every} must be >= 0 (0: never log).")

    @classmethod
    def from_spec(cls, spec: PackingSpec, **fields: Any) -> PackingConfig:
        """``spec``'s knobs plus the encoder-only ``fields`` (``pad_token_id``, ``log_every``)."""
        knobs = {f.name: getattr(spec, f.name) for f in dataclasses.fields(PackingSpec)}
        return cls(**knobs, **fields)


@functools.cache
def _encode_draws_random(cls: type) -> bool:
    """False only when the class that defines ``cls.encode_document`` declares, in its own body,
    ``encode_draws_random = False``."""
    owner = next(c for c in cls.__mro__ if "encode_document" in vars(c))
    return bool(vars(owner).get("encode_draws_random", True))


class PackingTaskEncoder(TaskEncoder[T_sample, EncodedSample, Any, Any], Generic[T_sample]):
    """Generic packing task encoder; subclasses implement :meth:`encode_document`.

    Args:
        config: A :class:`PackingConfig` (or a :class:`~energon_pack.algorithms.PackingSpec`,
            e.g. the one ``energon-pack simulate`` was run with); or pass its fields as keyword
            arguments (``PackingTaskEncoder(pack_size=4096, overlong="split")``).

    Attributes:
        config: The packing configuration.
        stats: :class:`~energon_pack.encoding.PackingStats` of this process.
    """

    #: True when the buffer holds light documents (media planned, not decoded): energon's
    #: postencode then runs :meth:`materialize` on each member of a selected pack.
    light_media: bool = False
    #: Fingerprint entries (names or prefixes, e.g. ``{"packing.pack_size"}``, ``{"packing"}``,
    #: ``{"*"}``) that may differ between a saved loader state and the loader restoring it; set
    #: it on the encoder before building the loader to resume with a change on purpose.
    resume_accept_changes: frozenset[str] = frozenset()
    #: Whether :meth:`encode_document` may draw random numbers (``random``, NumPy, torch):
    #: ``encode_sample`` then seeds them from the sample's restore key and restores the caller's
    #: state after it. A class that sets False in its own body vouches for its own
    #: ``encode_document`` only: a subclass that overrides it is seeded unless it says False too.
    encode_draws_random: bool = True
    #: Make a metadataset's ``blend:`` weights hold in sizes instead of samples: None (energon's
    #: sample-weighted blend), ``"tokens"``, ``"bytes"`` or a callable ``raw_sample -> int``;
    #: overriding :meth:`blend_sample_size` turns it on too. docs/howto/blends.md.
    blend_size: Any = None
    #: A packing policy per group of a metadataset blend (``{"video": PackingPolicy(
    #: buffer_size=8), "text": PackingPolicy(buffer_size=256)}``; leaves name their group in
    #: the ``packing_group`` subflavor): each group packed in its own buffer. None: one buffer.
    #: docs/howto/blends.md.
    packing_groups: Mapping[str, PackingPolicy] | None = None

    def __init__(self, config: PackingSpec | None = None, **config_fields: Any) -> None:
        if config is None:
            cfg = PackingConfig(**config_fields)
        elif not isinstance(config, PackingConfig):  # a bare PackingSpec
            cfg = PackingConfig.from_spec(config, **config_fields)
        else:
            cfg = dataclasses.replace(config, **config_fields)
        self.config = cfg
        self.stats = PackingStats(log_every=cfg.log_every)
        # Set by build_batch for stock packing (no carry-over): the buffer size to check.
        self._stock_buffer_size: float = math.inf
        self._warned_small_buffer = False
        # Set by a grouped build: each group's leaves (places in the metadataset) and buffer.
        self._group_leaves: dict[str | None, list[int]] | None = None
        self._group_buffers: dict[str | None, int] = {}
        self._group_specs: dict[str | None, PackingSpec] = {}

    @property
    def pack_size(self) -> int:
        """Tokens per pack."""
        return self.config.pack_size

    # -- the one method a task implements --------------------------------------------------

    def encode_document(self, sample: T_sample) -> EncodedSample | Iterable[EncodedSample]:
        """Encode one source sample into one document (or several, e.g. one per turn).

        Use ``EncodedSample.derive_from(sample, tokens=..., loss_mask=...)`` (keys carry over).
        Runs seeded from the sample's restore key, so random draws reproduce on resume; raise
        to skip a bad sample; return a new object per document and do not change it afterwards
        (``encode_sample`` runs one document ahead). See docs/howto/custom-task.md.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement encode_document().")

    # -- energon hooks -----------------------------------------------------------------------

    def _seeds_encode(self) -> bool:
        """Whether ``encode_sample`` seeds the RNGs (see :attr:`encode_draws_random`)."""
        return self.encode_draws_random or _encode_draws_random(type(self))

    @seeded_stateless(
        seed_from=SeedSource.RESTORE_KEY, run_ahead=True, seed_if=lambda self: self._seeds_encode()
    )
    def encode_sample(self, sample: T_sample) -> Generator[EncodedSample, None, None]:
        """Encode, drop empty documents, apply the over-long policy (yields 0..n documents).

        Seeded from the input sample's restore key, not energon's sample index (see
        ``SeedSource``). Under ``overlong="error"`` an over-long sample stops the loader."""
        # The stats are looked up at each count: after a restore, energon re-runs an interrupted
        # generator up to where it stopped (counted before) and then on (counted now).
        self._stats_now().samples += 1
        result = self.encode_document(sample)
        docs = [result] if isinstance(result, EncodedSample) else result
        for doc in docs:
            if doc.tokens.shape[0] == 0:
                self._stats_now().record_drop(doc.__key__, "encoded to zero tokens", kind="empty")
                continue
            for piece in apply_overlong_policy(
                doc,
                self.config.pack_size,
                self.config.overlong,
                self._stats_now(),
                no_cut=self._no_cut_spans(doc) if doc.length > self.config.pack_size else None,
            ):
                stats = self._stats_now()
                spec = self._spec_of(piece)
                if spec.has_media_budgets and self._over_media_budget(piece, stats, spec):
                    continue
                stats.documents += 1
                yield piece

    def _no_cut_spans(self, doc: EncodedSample) -> torch.Tensor:
        """Hook: the ``(k, 2)`` token spans no over-long cut may fall inside (default: the
        document's media spans)."""
        return doc.media_spans()

    def _over_media_budget(
        self, doc: EncodedSample, stats: PackingStats, spec: PackingSpec | None = None
    ) -> bool:
        """Drop and count ``doc`` (in ``dropped_over_budget``, logged with its key) when its media
        alone exceed a per-pack media budget of ``spec`` (default: the config's): no pack could
        ever hold it."""
        why = (spec or self.config).media_over_budget(*doc.media_load)
        if why is not None:
            stats.record_drop(
                doc.__key__,
                f"{why}: no pack can hold it (raise the budget, or shrink the media, e.g. "
                "the processor's max_pixels or the video frames)",
                kind="over_budget",
            )
        return why is not None

    def materialize(self, doc: EncodedSample, *, into_pack: bool = False) -> EncodedSample:
        """Hook: a light document with its media decoded and processed (default: ``doc``).

        Runs seeded (from the member's restore key) on each member of a selected pack, with
        ``into_pack=True``: pixel rows may then be left unwritten (a ``RowSource`` such as
        ``PendingPixels``) for the pack to write straight into its own array.
        """
        return doc

    @seeded_stateless(seed_from=SeedSource.RESTORE_KEY)
    def _postencode(self, doc: EncodedSample) -> EncodedSample:
        """energon's post-encode step (light media): :meth:`materialize` for the pack."""
        return self.materialize(doc, into_pack=True)

    def _init_light_media(
        self, requested: bool | None, image_processor: Any, augmenters: tuple[str, ...]
    ) -> None:
        """Light or stock buffers for a media encoder (:func:`resolve_light_media`): light where
        exact; unless requested, stock where a subclass overrides one of the ``augmenters`` (an
        augmentation may change sizes). Call it after the base ``__init__``."""
        cls = type(self)
        first = {m: next(c for c in reversed(cls.__mro__) if m in vars(c)) for m in augmenters}
        augmented = any(getattr(cls, m) is not vars(first[m])[m] for m in augmenters)
        #: Plans documents from media headers, or None: media are decoded in the buffer.
        self.media_planner = resolve_light_media(
            requested,
            image_processor,
            augmented=augmented,
            name=type(self).__name__,
        )
        self.light_media = self.media_planner is not None
        #: Samples this process decoded in the buffer although light (no planned size).
        self.light_fallbacks = 0

    def spec_for_group(self, group: str | None) -> PackingSpec:
        """The packing spec of a packing group (:attr:`packing_groups`): the config with the
        group's policy applied (the config itself for the default group)."""
        if group not in self._group_specs:
            policy = (self.packing_groups or {}).get(group) if group is not None else None
            self._group_specs[group] = self.config if policy is None else policy.spec(self.config)
        return self._group_specs[group]

    def _spec_of(self, doc: EncodedSample) -> PackingSpec:
        """The spec ``doc`` is packed under: its packing group's (:meth:`spec_for_group`)."""
        return self.spec_for_group(group_of(doc)) if self.packing_groups else self.config

    def _stats_now(self) -> PackingStats:
        """``self.stats``, or a scratch one while ``restore_sample`` rebuilds a counted item."""
        return PackingStats(log_every=0) if restoring_item() else self.stats

    def select_samples_to_pack(self, samples: list[EncodedSample]) -> list[list[EncodedSample]]:
        """Partition the buffer with the configured algorithm (every sample exactly once).

        With media budgets or ``step_packs`` in the config, each document's
        :attr:`~energon_pack.samples.EncodedSample.media_load` goes to the algorithm too: no
        pack exceeds a budget and the step order levels the vision load. With
        :attr:`packing_groups`, each group's documents are packed apart under its policy (a
        training buffer holds one group; a validation buffer may hold several).
        """
        group = group_of(samples[0]) if samples and self.packing_groups else None
        buffer = self._stock_buffer_size
        if self._group_leaves is not None and self.spec_for_group(group).carry_over is None:
            buffer = self._group_buffers.get(group, buffer)
        if not self._warned_small_buffer and len(samples) >= buffer:
            # A full buffer (not the end-of-data flush) that cannot fill a pack: say so once.
            self._warned_small_buffer = warn_if_buffer_too_small(
                [s.tokens.shape[0] for s in samples], self.config.pack_size, len(samples)
            )
        if not self.packing_groups:
            return self._select(samples, self.config)
        parts: dict[str | None, list[EncodedSample]] = {}
        for sample in samples:
            parts.setdefault(group_of(sample), []).append(sample)
        return [b for g, part in parts.items() for b in self._select(part, self.spec_for_group(g))]

    @staticmethod
    def _select(samples: list[EncodedSample], spec: PackingSpec) -> list[list[EncodedSample]]:
        """``samples`` in bins of ``spec``'s algorithm, limits and budgets."""
        lengths = [s.tokens.shape[0] for s in samples]
        media = MediaLoad.of(s.media_load for s in samples) if spec.uses_media else None
        bins = pack_lengths(lengths, spec, media=media)
        return [[samples[i] for i in b] for b in bins]

    @stateless
    def pack_selected_samples(self, samples: list[EncodedSample]) -> PackedTextSample:
        """Concatenate the selected documents into the pack type registered for them."""
        pack = pack_documents(
            samples,
            alignment=self.config.alignment,
            pad_token_id=self.config.pad_token_id,
            **self.pack_options(),
        )
        pack = self.finalize_pack(pack, samples)
        if restoring_item():  # counted when it was first made
            counts = PackingCounts()
        else:
            self.stats.record_pack(
                doc_lengths=pack.doc_lengths,
                pack_size=self.config.pack_size,
                **dataset_counts(pack, samples, self._group_leaves),
            )
            counts = self.stats.take_counts()
        if isinstance(pack, PackedTextSample):
            pack.counts = counts
        return pack

    def finalize_pack(self, pack: PackedTextSample, samples: Sequence[EncodedSample]) -> Any:
        """Hook: add task-specific fields to ``pack`` (default: return it unchanged).

        Concatenate your documents' extra fields here and return a subclass of the pack type,
        e.g. ``MyPack(**{f.name: getattr(pack, f.name) for f in fields(pack)}, extra=...)``.
        Must be deterministic: it runs again on ``restore_sample``.
        """
        return pack

    def pack_options(self) -> dict[str, Any]:
        """The modality's options of ``pack_documents`` (default: none)."""
        return {}

    def packed_length(self, sample: EncodedSample) -> int:
        """Pack slots a document occupies: its length rounded up to the alignment."""
        return self.config.slots(sample.tokens.shape[0])

    def blend_sample_size(self, raw_sample: Any) -> int:
        """Hook (energon PR #238's name): the size a raw sample adds to its dataset's share of a
        size-weighted blend, under :attr:`blend_size` (e.g. its token count)."""
        return raw_sample_size(self, raw_sample)

    def fingerprint_extras(self) -> dict[str, str]:
        """Resume fingerprint entries beyond the encoder's fields: what a blend weighs."""
        blend = blend_description(self)
        extras = {} if blend is None else {"blend_size": blend}
        return {**extras, **policy_fingerprint(self.packing_groups)}

    def build_train_datasets(self, *, worker_config: Any, **kwargs: Any) -> Any:
        """energon's, with every stage's error handler counting skipped samples in
        ``stats.skipped`` (:func:`~energon_pack.energon.building_datasets`), the guards of
        :mod:`energon_pack.energon` for exact resume, and a size-weighted blend if asked for
        (:attr:`blend_size`); with :attr:`packing_groups`, one packing pipeline per group."""
        self._group_leaves, self._group_buffers, self._group_specs = None, {}, {}
        build = (
            functools.partial(grouped_train_datasets, self)
            if self.packing_groups
            else super().build_train_datasets
        )
        with building_datasets(self, worker_config), blending(self, kwargs):
            return resumable(self, build, worker_config, kwargs)

    def build_val_datasets(self, *, worker_config: Any, **kwargs: Any) -> Any:
        """energon's, with the error handler and wrappers of :meth:`build_train_datasets`."""
        with building_datasets(self, worker_config):
            return resumable(self, super().build_val_datasets, worker_config, kwargs)

    def _load_dataset(self, dataset: Any, worker_rotation_offset: int, worker_config: Any) -> Any:
        """energon's reader (an energon internal hook), under a :class:`SourceEndGuard`."""
        inner = super()._load_dataset(dataset, worker_rotation_offset, worker_config)
        return guard_reader(self, inner, worker_config)

    def build_encode_sample(self, dataset: Any, *, worker_config: Any) -> Any:
        """energon's ``MapDataset(encode_sample)`` as an :class:`EncodeMapDataset` (same keys
        as the uninterrupted run after a resume, re-encoding at restore not counted)."""
        if self._is_overridden(self.preencode_sample):  # energon's pre-/post-encode split
            return super().build_encode_sample(dataset, worker_config=worker_config)
        return encode_map_dataset(self, dataset, worker_config)

    def build_batch(
        self,
        dataset: Any,
        *,
        batch_size: int | None,
        batch_drop_last: bool = False,
        packing_buffer_size: int | None = None,
        worker_config: Any,
    ) -> Any:
        """energon's ``build_batch``, with the post-encode (light media) or carry-over packing
        dataset. Without ``packing_buffer_size`` only a subclass whose own ``batch`` collates
        documents may run (this class's would get unpacked documents: ValueError)."""
        if packing_buffer_size is None and type(self).batch is PackingTaskEncoder.batch:
            raise ValueError(
                f"{type(self).__name__} packs documents, but packing_buffer_size is None, so "
                "energon would pass unpacked documents on; pass packing_buffer_size=... "
                "(samples per worker, e.g. 256) to get_train_dataset / get_val_dataset, or "
                "override batch() to collate single documents."
            )
        if packing_buffer_size is not None and self.config.carry_over is None:
            # The stock path checks the buffer in select_samples_to_pack (carry-over: its dataset).
            self._stock_buffer_size = packing_buffer_size
        if packing_buffer_size is not None and (
            self.light_media or self.config.carry_over is not None
        ):
            dataset = self._packing_dataset(
                dataset,
                packing_buffer_size=packing_buffer_size,
                worker_config=worker_config,
                spec=self.config,
            )
            packing_buffer_size = None
        return super().build_batch(
            dataset,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            packing_buffer_size=packing_buffer_size,
            worker_config=worker_config,
        )

    def _packing_dataset(
        self,
        dataset: Any,
        *,
        packing_buffer_size: int,
        worker_config: Any,
        spec: PackingSpec,
        pre_packer: Any = None,
    ) -> Any:
        """The packing dataset over ``dataset`` under ``spec``: carry-over (if the spec has it),
        else a restorable post-encode one (light media members materialized after selection,
        or no post-encoder). ``pre_packer``: in place of :meth:`select_samples_to_pack`."""
        if spec.carry_over is not None:
            return build_carry_over_dataset(
                self,
                dataset,
                packing_buffer_size=packing_buffer_size,
                worker_config=worker_config,
                spec=spec,
                sample_length=self.packed_length,
                # light: emitted members are materialized; carried ones stay planned
                sample_encoder=self._postencode if self.light_media else None,
                pre_packer=pre_packer,
            )
        return build_postencode_packing_dataset(
            self,
            dataset,
            packing_buffer_size=packing_buffer_size,
            worker_config=worker_config,
            sample_encoder=self._postencode if self.light_media else None,
            pre_packer=pre_packer,
        )

    @stateless
    def batch(self, samples: list[PackedTextSample]) -> Any:
        """Collate packs into their batch type with rows padded to ``pack_size``."""
        return collate_packs(
            samples, pad_to=self.config.pack_size, pad_token_id=self.config.pad_token_id
        )
