# SPDX-License-Identifier: Apache-2.0
"""energon's ``PackingDataset`` with a per-member post-encoder whose packs ``restore_sample``.

Light media buffers materialize the members of a selected pack in a post-encoder; energon's
``PackingDataset.restore_sample`` unpacks such a member's restore key twice and fails (bug 3 in
docs/concepts/energon.md). :class:`PostencodePackingDataset` unpacks it once; iteration, saved
state and pack keys stay energon's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from typing import Any

from megatron.energon.errors import handle_restore_errors
from megatron.energon.flavors.base_dataset import (
    SavableDataset,
    add_sample_restore_key,
    set_sample_restore_key,
)
from megatron.energon.task_encoder.base import TaskEncoder, get_failure_tolerance, get_stateless
from megatron.energon.worker import WorkerConfig
from megatron.energon.wrappers.packing_dataset import PackingDataset

__all__ = ["PostencodePackingDataset", "build_postencode_packing_dataset"]


class PostencodePackingDataset(PackingDataset):
    """``PackingDataset`` whose ``restore_sample`` works with a ``sample_encoder``."""

    def restore_sample(self, restore_key: Any) -> Any:
        """Rebuild one pack: restore, post-encode (under the same index) and pack its members."""
        if self.sample_encoder is None:
            return super().restore_sample(restore_key)
        self.assert_can_restore()
        generator = inspect.isgeneratorfunction(self.final_packer)
        if generator:
            name, pack_idx, pack_sub_idx, *member_keys = restore_key
        else:
            name, pack_idx, *member_keys = restore_key
        assert name == type(self).__name__, f"{name!r} is not a key of {type(self).__name__}"
        pack = []
        for member_key in member_keys:
            name, sample_idx, *inner = member_key  # unpacked once (energon: twice)
            assert name == type(self).__name__ and isinstance(sample_idx, int)
            sample = self.dataset.restore_sample(tuple(inner))
            with handle_restore_errors(self.worker_config.restore_error_handler, sample):
                with self._sample_encoder_sample_index.ctx(sample_idx):
                    sample = self.sample_encoder(sample)
                assert not isinstance(sample, Generator), "Generator not supported"
                sample = add_sample_restore_key(sample, sample_idx, src=self)
            pack.append(sample)
        with handle_restore_errors(self.worker_config.restore_error_handler, pack):
            with self._final_packing_sample_index.ctx(pack_idx):
                final_pack = self.final_packer(pack)
        if not generator:
            return set_sample_restore_key(final_pack, pack_idx, *member_keys, src=self)
        for sub_idx, (idx, item) in enumerate(
            self._final_packing_sample_index.iter_ctx(final_pack, pack_idx)
        ):
            if sub_idx == pack_sub_idx:
                return set_sample_restore_key(item, idx, pack_sub_idx, *member_keys, src=self)
        raise AssertionError(f"pack sub-index {pack_sub_idx} not found in the pack")


def packing_arguments(
    task_encoder: TaskEncoder[Any, Any, Any, Any],
    *,
    sample_encoder: Callable[[Any], Any] | None = None,
    pre_packer: Callable[[list[Any]], list[list[Any]]] | None = None,
) -> dict[str, Any]:
    """The ``PackingDataset`` arguments energon derives from a task encoder's packing hooks:
    ``pre_packer`` (``select_samples_to_pack``, or the one given) / ``final_packer``, the final
    packer's statelessness and the failure tolerances (the hook's own, else the encoder's
    default); with ``sample_encoder`` (a method of ``task_encoder``), it as the per-member
    post-encoder with its statelessness and tolerance."""
    tolerance = task_encoder.__default_failure_tolerance__
    select, pack = task_encoder.select_samples_to_pack, task_encoder.pack_selected_samples
    arguments: dict[str, Any] = {
        "pre_packer": select if pre_packer is None else pre_packer,
        "final_packer": pack,
        "final_packer_stateless": get_stateless(pack),
        "pre_packer_failure_tolerance": get_failure_tolerance(select, tolerance),
        "final_packer_failure_tolerance": get_failure_tolerance(pack, tolerance),
        "sample_encoder_failure_tolerance": 0,
    }
    if sample_encoder is not None:
        arguments["sample_encoder"] = sample_encoder
        arguments["sample_encoder_stateless"] = get_stateless(sample_encoder)
        arguments["sample_encoder_failure_tolerance"] = get_failure_tolerance(
            sample_encoder, tolerance
        )
    return arguments


def build_postencode_packing_dataset(
    task_encoder: TaskEncoder[Any, Any, Any, Any],
    dataset: SavableDataset[Any],
    *,
    packing_buffer_size: int,
    worker_config: WorkerConfig,
    sample_encoder: Callable[[Any], Any] | None,
    pre_packer: Callable[[list[Any]], list[list[Any]]] | None = None,
) -> PostencodePackingDataset:
    """What energon's ``build_batch`` builds for packing with ``postencode_sample``, restorable.

    ``sample_encoder`` (a stateless method of ``task_encoder``) runs on each member of a selected
    pack (None: none, energon's ``PackingDataset`` as it is). ``pre_packer`` stands in for
    ``task_encoder.select_samples_to_pack`` (a packing group's checked selection). Call it from
    ``build_batch`` and pass ``packing_buffer_size=None`` to energon's.
    """
    return PostencodePackingDataset(
        dataset,
        buffer_size=packing_buffer_size,
        worker_config=worker_config,
        **packing_arguments(task_encoder, sample_encoder=sample_encoder, pre_packer=pre_packer),
    )
