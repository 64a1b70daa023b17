# SPDX-License-Identifier: Apache-2.0
"""Exact resume: nothing replayed at the end of an epoch, the same restore keys, counts not doubled,
and a changed configuration refused.

The packing task encoders build ``ResumeGuard(... SourceEndGuard(reader) ... EncodeMapDataset(
encode_sample) ... packing ...)``: :class:`SourceEndGuard` keeps a reader restored at its end
silent for the rest of the epoch (bug 5), :class:`ResumeGuard` counts epochs, undoes the
placeholder-checkpoint skip (bug 6) and checks the :func:`fingerprint` of the configuration,
:class:`EncodeMapDataset` resumes an interrupted generator under its own index (bug 4) and
re-encodes at restore inside :func:`rebuilding` (nothing counted twice). Each bug, its effect
and the test that shows it: docs/concepts/energon.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch.utils.data
from megatron.energon.flavors.base_dataset import FlexState, SavableDataset, add_sample_restore_key
from megatron.energon.task_encoder.base import get_failure_tolerance, get_stateless
from megatron.energon.wrappers.base import BaseWrapperDataset, get_sample_restore_key
from megatron.energon.wrappers.map_dataset import MapDataset

from energon_pack.energon._build_hooks import rebuilding
from energon_pack.energon._dataset_identity import dataset_identity
from energon_pack.energon._fingerprint import fingerprint
from energon_pack.energon._one_storage import one_storage
from energon_pack.energon._restore_check import (
    FINGERPRINT_FORMAT,
    FINGERPRINT_FORMAT_KEY,
    ResumeConfigError,
    changes,
    install_restore_check,
    refusal,
)
from energon_pack.samples._arena import in_loader_worker

__all__ = [
    "EncodeMapDataset",
    "ResumeClock",
    "ResumeConfigError",
    "ResumeGuard",
    "SourceEndGuard",
    "encode_map_dataset",
    "guard_reader",
    "resumable",
]


class ResumeClock:
    """Loader epochs of one worker: :class:`ResumeGuard` advances it, every
    :class:`SourceEndGuard` of the same loader reads it."""

    def __init__(self) -> None:
        #: Loader epochs begun.
        self.epoch = 0
        #: Passes over the loader's dataset begun (energon may start one again in an epoch).
        self.passes = 0
        #: This pass repeats one whose items energon skipped to the end (see ``ResumeGuard``).
        self.repass = False


class _PassThrough(BaseWrapperDataset[Any, Any]):
    """A wrapper that changes no sample and no restore key."""

    def len_worker(self, worker_idx: int | None = None) -> int:
        return self.dataset.len_worker(worker_idx)

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__qualname__, "dataset": self.dataset.config()}

    def __str__(self) -> str:
        return f"{type(self).__name__}(dataset={self.dataset})"


class SourceEndGuard(_PassThrough):
    """Right above a reader: saves whether it reached its end; restored so, yields nothing for
    the rest of that loader epoch (bug 5 in docs/concepts/energon.md)."""

    _savable_fields = ("_ended",)

    def __init__(self, dataset: SavableDataset[Any], *, clock: ResumeClock, **kwargs: Any):
        super().__init__(dataset, **kwargs)
        self._clock = clock
        self.reset_state_own()

    def reset_state_own(self) -> None:
        #: The reader reached the end of its share and nothing has read it again since.
        self._ended = False
        #: The loader epoch in which a restored ``_ended`` reader yields nothing.
        self._silent_epoch: int | None = None
        #: The pass (``ResumeClock.passes``) in which it ended.
        self._ended_pass = 0

    def restore_state(self, state: FlexState) -> None:
        super().restore_state(state)
        self._silent_epoch = self._clock.epoch + 1 if self._ended else None

    def __iter__(self) -> Iterator[Any]:
        clock = self._clock
        if self._silent_epoch == clock.epoch:
            return  # restored at the end of its share: this loader epoch is over for it
        if self._ended and clock.repass and self._ended_pass < clock.passes:
            return  # it ended in the pass energon skipped and now repeats: the same epoch
        self._ended = False
        self._silent_epoch = None
        yield from self.dataset
        self._ended = True
        self._ended_pass = clock.passes


class ResumeGuard(_PassThrough):
    """The outermost wrapper: counts loader epochs and checks the configuration at restore.

    Args:
        dataset: The loader's dataset (what energon's ``build_train_datasets`` returns).
        clock: The clock shared with the loader's :class:`SourceEndGuard` wrappers.
        fingerprint: :func:`fingerprint` of the configuration.
        accept: Fingerprint entries (or their prefixes, e.g. ``"packing"``) allowed to differ.
    """

    _savable_fields = ("_fingerprint",)

    def __init__(
        self,
        dataset: SavableDataset[Any],
        *,
        clock: ResumeClock,
        fingerprint: Mapping[str, str],
        accept: frozenset[str] = frozenset(),
        **kwargs: Any,
    ):
        super().__init__(dataset, **kwargs)
        self._clock = clock
        self._own = dict(fingerprint)
        self._accept = accept
        self.reset_state_own()

    def reset_state_own(self) -> None:
        self._fingerprint = dict(self._own)
        #: energon skipped every item of the last pass (restoring to the end of the share).
        self._skipped_pass = False

    def changes(self, saved: Mapping[str, str]) -> list[str]:
        """``"name: saved -> now"`` for each entry of a saved fingerprint that differs from this
        loader's and is not accepted."""
        return changes(saved, self._own, self._accept)

    def restore_state(self, state: FlexState) -> None:
        saved = state.get("_fingerprint") if state is not None else None
        changed = self.changes(saved or {})
        if changed:
            raise ResumeConfigError(refusal(changed, acceptable=changed))
        super().restore_state(state)
        self._fingerprint = dict(self._own)
        self._restored = True

    def __iter__(self) -> Iterator[Any]:
        if not getattr(self, "_restored", False):
            _undo_placeholder_skip()
        self._restored = False
        clock = self._clock
        clock.passes += 1
        # energon (SavableDatasetWrapper) restores a worker from an older checkpoint and skips
        # the items up to the save; when they reach the end of its share it starts the dataset
        # again in the same epoch (a new epoch would train the share twice).
        clock.repass = self._skipped_pass
        clock.epoch += not clock.repass
        items = emitted = 0
        # an item a worker sends goes through shared memory once per tensor storage
        send = one_storage if in_loader_worker() else None
        for item in self.dataset:
            yield item if send is None else send(item)
            items += 1
            emitted += _passed_on(item)
        self._skipped_pass = items > 0 and emitted == 0


def _undo_placeholder_skip() -> None:
    """energon bug 6 (docs/concepts/energon.md): a save that reaches a worker before its
    first checkpoint stores the placeholder (no state, offset 1), and the restored worker skips
    its first item. A worker whose dataset was not restored has nothing to skip: reset the skip
    count of energon's ``SavableDatasetWrapper`` (the worker's dataset) to 0."""

    wrapper = getattr(torch.utils.data.get_worker_info(), "dataset", None)
    skips = getattr(wrapper, "_workers_skip_samples", None)
    worker = getattr(wrapper, "_worker_id", None)
    if isinstance(skips, list) and isinstance(worker, int) and 0 <= worker < len(skips):
        skips[worker] = 0


def _passed_on(item: Any) -> bool:
    """Whether energon's loader wrapper passed ``item`` on (it prefixes the restore key of the
    items it yields, not of those it skips to reach a restored position)."""
    key = get_sample_restore_key(item)
    return not key or key[0] in ("SavableDatasetWrapper", "SimpleSavableDatasetWrapper")


class EncodeMapDataset(MapDataset[Any, Any]):
    """energon's ``MapDataset`` for ``encode_sample``: an interrupted generator resumes under its
    own sample index (bug 4), and re-encoding at restore counts nothing."""

    def restore_sample(self, restore_key: Any) -> Any:
        with rebuilding():  # a buffered sample, already counted when it was first encoded
            return super().restore_sample(restore_key)

    def __iter__(self) -> Iterator[Any]:
        if self._generator_sample_key is not None:
            yield from self._resume_generator()
        yield from super().__iter__()

    def _resume_generator(self) -> Iterator[Any]:
        """The rest of the generator a save interrupted, under the index it first ran with."""
        sample = self.dataset.restore_sample(self._generator_sample_key)
        sample_idx = self._sample_index.current_idx - 1  # energon uses current_idx (bug 4)
        offset, self._generator_offset = self._generator_offset or 0, 0
        assert inspect.isgeneratorfunction(self.map_fn), f"{self.map_fn} is not a generator"
        with rebuilding():  # the pieces before `offset` were counted in the first run
            with self._sample_index.ctx(sample_idx):
                pieces = self._sample_index.iter_ctx(self.map_fn(sample), sample_idx)
                skipped = [next(pieces, None) for _ in range(offset)]
        assert all(p is not None for p in skipped), "the generator yields fewer pieces now"
        for idx, (idx_out, piece) in enumerate(pieces, start=offset):
            self._generator_offset = idx + 1
            yield add_sample_restore_key(piece, idx_out, idx, src=self)
        self._generator_sample_key = None
        self._generator_offset = None


def resumable(
    encoder: Any, build: Callable[..., Any], worker_config: Any, kwargs: dict[str, Any]
) -> ResumeGuard:
    """``build(worker_config=..., **kwargs)`` (energon's ``build_train_datasets`` or
    ``build_val_datasets``) under a :class:`ResumeGuard` with the configuration's fingerprint;
    the readers it loads meanwhile get a :class:`SourceEndGuard` (:func:`guard_reader`) on the
    same clock, ``encoder._resume_clock``."""
    encoder._resume_clock = ResumeClock()
    dataset = build(worker_config=worker_config, **kwargs)
    config_print = {
        FINGERPRINT_FORMAT_KEY: FINGERPRINT_FORMAT,
        **fingerprint(
            encoder=encoder,
            packing=encoder.config,
            **{key: kwargs.get(key) for key in _LOADER_SETTINGS},
            num_workers=worker_config.num_workers,
            world_size=worker_config.world_size,
            rank=worker_config.rank,
            seed_offset=worker_config.seed_offset,
        ),
        **dataset_identity(kwargs.get("datasets") or ()),
        **getattr(encoder, "fingerprint_extras", dict)(),
    }
    install_restore_check()
    return ResumeGuard(
        dataset,
        clock=encoder._resume_clock,
        fingerprint=config_print,
        accept=frozenset(encoder.resume_accept_changes),
        worker_config=worker_config,
    )


#: ``build_train_datasets`` arguments that shape the stream (``batch_size`` energon checks).
_LOADER_SETTINGS = (
    "packing_buffer_size",
    "shuffle_buffer_size",
    "virtual_epoch_length",
    "blend_mode",
    "repeat",
    "batch_drop_last",
)


def guard_reader(encoder: Any, reader: SavableDataset[Any], worker_config: Any) -> SourceEndGuard:
    """A reader energon loaded (``TaskEncoder._load_dataset``) under a :class:`SourceEndGuard`."""
    clock = getattr(encoder, "_resume_clock", None) or ResumeClock()
    return SourceEndGuard(reader, clock=clock, worker_config=worker_config)


def encode_map_dataset(
    encoder: Any, dataset: SavableDataset[Any], worker_config: Any
) -> EncodeMapDataset:
    """energon's ``MapDataset(encoder.encode_sample)`` as an :class:`EncodeMapDataset`, with the
    method's statelessness and failure tolerance (its own, else the encoder's default)."""
    encode = encoder.encode_sample
    return EncodeMapDataset(
        dataset,
        encode,
        worker_config=worker_config,
        stateless_map_fn=get_stateless(encode),
        failure_tolerance=get_failure_tolerance(encode, encoder.__default_failure_tolerance__),
    )
