# SPDX-License-Identifier: Apache-2.0
"""Blend weights that hold in sizes (tokens, bytes, media tokens), not samples.

A metadataset ``blend:`` weighs samples: a 1:1 blend of 40-token chats and 4000-token documents
gives the documents 99% of the tokens (energon issue #212). :class:`SizeBlendDataset` takes the
place of energon's ``BlendDataset`` and picks, for each next sample, the dataset furthest below
its share of the emitted size (the deficit-credit rule of energon PR #238, without its random
draw)::

    deficit_i = weight_i / sum(weights) * sum(emitted) - emitted_i      pick argmax (lowest i)

Trace, weights 1:1, dataset 0 yields sizes 10, 10, ..., dataset 1 yields 30, 30, ...::

    emitted (0, 0)  deficits (0, 0)      -> 0     emitted (10, 0)
    emitted (10, 0) deficits (-5, 5)     -> 1     emitted (10, 30)
    emitted (10,30) deficits (10, -10)   -> 0     emitted (20, 30)
    emitted (20,30) deficits (5, -5)     -> 0     emitted (30, 30)  ...  3 samples of 0 per 1 of 1

The size of a raw sample (before encoding) comes from ``sample_size`` (the task encoder's
``blend_sample_size``). The emitted sizes and sample counts per dataset are saved state, so a
restore continues the same picks; the rule draws no random numbers. :func:`size_blending`
makes energon's ``build_train_datasets`` build it wherever it would build a ``BlendDataset``.
How-to: docs/howto/blends.md.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from megatron.energon.flavors.base_dataset import SavableDataset, add_sample_restore_key
from megatron.energon.wrappers.base import BaseWrapperDataset

from energon_pack.energon._build_hooks import sample_keys
from energon_pack.energon._version import check_energon_version

__all__ = ["SizeBlendDataset", "blend_index", "size_blending"]

T_sample = TypeVar("T_sample")


class SizeBlendDataset(BaseWrapperDataset[T_sample, T_sample]):
    """energon's ``BlendDataset`` with weights in sizes: see the module docstring.

    Args:
        dataset_weights: ``(dataset, weight)`` pairs, as for energon's ``BlendDataset``.
        sample_size: Size of a raw sample (an ``int >= 0``), e.g. its token count.
        worker_config: energon's worker configuration.

    Attributes:
        emitted_sizes: Summed ``sample_size`` of the samples this worker took from each dataset
            (saved state).
        emitted_samples: Samples this worker took from each dataset (saved state).
    """

    _savable_fields = ("exhausted", "emitted_sizes", "emitted_samples")

    def __init__(
        self,
        *dataset_weights: tuple[SavableDataset[T_sample], float],
        sample_size: Callable[[Any], int],
        worker_config: Any,
    ):
        self.datasets, self.weights = zip(*dataset_weights)
        super().__init__(self.datasets, worker_config=worker_config)
        for i, weight in enumerate(self.weights):
            if not weight > 0:
                raise ValueError(f"blend weight {weight!r} of dataset {i} must be > 0.")
        self.dataset_weights = dataset_weights
        self.sample_size = sample_size
        self.reset_state_own()

    def reset_state_own(self) -> None:
        n = len(self.weights)
        self.exhausted = [False] * n
        self.emitted_sizes = [0] * n
        self.emitted_samples = [0] * n

    def len_worker(self, worker_idx: int | None = None) -> int:
        return sum(dataset.len_worker(worker_idx) for dataset in self.datasets)

    def pick(self, active: list[int]) -> int:
        """The active dataset with the largest deficit (the lowest index among equals)."""
        total = sum(self.emitted_sizes[i] for i in active)
        weight = sum(self.weights[i] for i in active)
        deficits = [self.weights[i] / weight * total - self.emitted_sizes[i] for i in active]
        return active[deficits.index(max(deficits))]

    def _size(self, sample: Any) -> int:
        size = self.sample_size(sample)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(
                f"blend_sample_size({sample_keys(sample)[0]!r}) returned {size!r}; it must be "
                "an int >= 0 (the sample's tokens, bytes, ...): fix the task encoder's "
                "blend_sample_size / blend_size."
            )
        return size

    def __iter__(self) -> Iterator[T_sample]:
        iters: list[Iterator[T_sample] | None] = []
        for idx, dataset in enumerate(self.datasets):
            has = dataset.worker_has_samples() and not self.exhausted[idx]
            iters.append(iter(dataset) if has else None)
            self.exhausted[idx] = not has
        if all(it is None for it in iters):
            raise RuntimeError(
                "A worker has no samples in any of the blended datasets: use fewer workers or "
                "more shards."
            )
        while True:
            active = [i for i, it in enumerate(iters) if it is not None]
            if not active:
                break
            idx = self.pick(active)
            try:
                sample = next(iters[idx])  # type: ignore[arg-type]
            except StopIteration:
                iters[idx] = None
                self.exhausted[idx] = True
                continue
            sample = add_sample_restore_key(sample, idx, src=self)
            size = self._size(sample)  # measured under the key the encoder will see
            self.emitted_sizes[idx] += size
            self.emitted_samples[idx] += 1
            yield sample
        self.reset_state_own()

    def config(self) -> dict[str, Any]:
        return {
            "type": type(self).__qualname__,
            "dataset_weights": [(d.config(), w) for d, w in self.dataset_weights],
            "sample_size": self._function_config(self.sample_size),
            "worker_config": self.worker_config.config(),
        }

    def __str__(self) -> str:
        return f"SizeBlendDataset(dataset_weights={self.dataset_weights})"


#: The blends whose restore keys hold ``(name, dataset index)``.
_BLENDS = frozenset({"BlendDataset", "SizeBlendDataset"})


def blend_index(restore_key: Any) -> int | None:
    """The place in a metadataset blend of the dataset a sample came from, read from its
    ``__restore_key__`` (``('MapDataset', 7, 'SizeBlendDataset', 1, 'Webdataset', 40)`` -> 1),
    or None for a sample from no blend."""
    if not isinstance(restore_key, tuple):
        return None
    for i, part in enumerate(restore_key):
        if isinstance(part, tuple):
            found = blend_index(part)
            if found is not None:
                return found
        elif part in _BLENDS and i + 1 < len(restore_key):
            index = restore_key[i + 1]
            return index if isinstance(index, int) else None
    return None


@contextlib.contextmanager
def size_blending(sample_size: Callable[[Any], int]) -> Iterator[None]:
    """While energon's ``build_train_datasets`` runs, every ``BlendDataset`` it builds is a
    :class:`SizeBlendDataset` with ``sample_size``. energon 7.4.1 builds the blend inline
    (``task_encoder/base.py``, no hook): the module's name is swapped and put back."""
    from megatron.energon.task_encoder import base

    check_energon_version(
        feature="Size-weighted blending",
        relies_on="the BlendDataset that task_encoder/base.py builds inline",
        off="turn it off (encoder.blend_size = None)",
    )
    original = base.BlendDataset
    base.BlendDataset = functools.partial(SizeBlendDataset, sample_size=sample_size)  # type: ignore
    try:
        yield
    finally:
        base.BlendDataset = original
