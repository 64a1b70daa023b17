# SPDX-License-Identifier: Apache-2.0
"""A restore refuses what changed, in the main process at ``restore_state_rank``, naming the
change: the tokenizer's serialized sections and chat template, the dataset's shards and
energon's reading settings, ``num_workers``; an unchanged configuration (a copied tokenizer, a
copied dataset) restores and continues as the uninterrupted run."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from energon_pack.energon import ResumeConfigError
from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack.testing import assert_same_item
from energon_pack.training import make_loader
from energon_pack_tools import make_text_dataset

PACK = 32


@pytest.fixture(scope="module")
def texts(corpus: list[str]) -> list[str]:
    return corpus[:40]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    return make_text_dataset(tmp_path_factory.mktemp("drift") / "ds", texts, samples_per_shard=10)


def _loader(tokenizer: Any, path: Path, **kwargs: Any) -> Any:
    encoder = LLMPackingTaskEncoder(tokenizer, pack_size=PACK)
    kwargs.setdefault("packing_buffer_size", 8)
    return make_loader(path, encoder, **kwargs)


def _saved(tokenizer: Any, path: Path, items: int = 2, **kwargs: Any) -> Any:
    loader = _loader(tokenizer, path, **kwargs)
    it = iter(loader)
    for _ in range(items):
        next(it)
    state = loader.save_state_rank()
    if kwargs.get("num_workers"):
        loader._iterator._shutdown_workers()  # not ~5 s per worker at the next gc
    return state


def _tokenizer_copy(src: Path, dst: Path, edit: Any = None) -> Path:
    """A copy of the tokenizer directory, with ``edit(tokenizers.Tokenizer)`` applied."""
    from tokenizers import Tokenizer

    shutil.copytree(src, dst)
    if edit is not None:
        tok = Tokenizer.from_file(str(dst / "tokenizer.json"))
        edit(tok)
        tok.save(str(dst / "tokenizer.json"))
    return dst


def _refused(loader: Any, state: Any, *names: str) -> str:
    with pytest.raises(ResumeConfigError) as error:
        loader.restore_state_rank(state)
    message = str(error.value)
    assert "\n" not in message
    for name in names:
        assert name in message, message
    return message


def test_a_copied_tokenizer_and_dataset_resume_as_the_uninterrupted_run(
    tokenizer_dir: Path, dataset: Path, tmp_path: Path
) -> None:
    reference = list(_loader(tokenizer_dir, dataset))
    state = _saved(tokenizer_dir, dataset, items=3)
    moved = shutil.copytree(dataset, tmp_path / "moved")  # another path, the same shards
    resumed = _loader(_tokenizer_copy(tokenizer_dir, tmp_path / "tok"), moved)
    resumed.restore_state_rank(copy.deepcopy(state))  # a restore consumes parts of the state
    rest = list(resumed)
    assert len(rest) == len(reference) - 3 > 0
    for i, (a, b) in enumerate(zip(reference[3:], rest)):  # only the path in __sources__ moved
        assert a.__key__ == b.__key__ and a.__restore_key__ == b.__restore_key__, f"item {i + 3}"
        assert a.tokens.tolist() == b.tokens.tolist() and a.labels.tolist() == b.labels.tolist()
    same = _loader(tokenizer_dir, dataset)
    same.restore_state_rank(state)
    for i, (a, b) in enumerate(zip(reference[3:], list(same), strict=True)):
        assert_same_item(a, b, what=f"item {i + 3}")


@pytest.mark.parametrize(
    ("section", "edit"),
    [
        ("normalizer", "lowercase"),
        ("pre_tokenizer", "whitespace"),
        ("post_processor", "bert"),
    ],
)
def test_a_changed_tokenizer_section_with_the_same_vocabulary_is_refused(
    tokenizer_dir: Path, dataset: Path, tmp_path: Path, section: str, edit: str
) -> None:
    from tokenizers import normalizers, pre_tokenizers, processors

    def change(tok: Any) -> None:
        if edit == "lowercase":
            tok.normalizer = normalizers.Lowercase()
        elif edit == "whitespace":
            tok.pre_tokenizer = pre_tokenizers.Whitespace()
        else:
            tok.post_processor = processors.BertProcessing(("</s>", 2), ("<s>", 1))

    state = _saved(tokenizer_dir, dataset)
    changed = _tokenizer_copy(tokenizer_dir, tmp_path / "tok", change)
    message = _refused(_loader(changed, dataset), state, f"encoder.tokenizer.tokenizer.{section}:")
    assert "encoder.tokenizer.tokenizer:" not in message  # the vocabulary is the same
    assert f"resume_accept_changes = {{'encoder.tokenizer.tokenizer.{section}'}}" in message


def test_a_tokenizer_changed_in_place_is_refused(tokenizer_dir: Path, dataset: Path) -> None:
    """The same tokenizer object, saved with, then edited in place and resumed with: the digest
    a build caches for a tokenizer is keyed on its serialized form, never on the object."""
    from tokenizers import normalizers

    from energon_pack.encoding import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    state = _saved(tok, dataset)
    tok.backend_tokenizer.normalizer = normalizers.Lowercase()
    message = _refused(_loader(tok, dataset), state, "encoder.tokenizer.tokenizer.normalizer:")
    assert "encoder.tokenizer.tokenizer:" not in message  # the vocabulary is the same
    tok.add_tokens(["<drift>"])
    _refused(_loader(tok, dataset), state, "encoder.tokenizer.tokenizer:", "added_tokens:")


def test_a_changed_chat_template_is_refused(
    tokenizer_dir: Path, dataset: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    state = _saved(tokenizer_dir, dataset)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(tmp_path / "tok")
    _refused(
        _loader(tmp_path / "tok", dataset), state, "encoder.tokenizer.tokenizer.chat_template:"
    )


def test_changed_shards_are_refused(
    tokenizer_dir: Path, dataset: Path, texts: list[str], tmp_path: Path
) -> None:
    state = _saved(tokenizer_dir, dataset)
    edited = list(texts)
    edited[12] = edited[12] + " again"  # one shard's bytes change, nothing else
    rewritten = make_text_dataset(tmp_path / "edited", edited, samples_per_shard=10)
    _refused(_loader(tokenizer_dir, rewritten), state, "dataset.shards: 4 shards, 40 samples")
    added = make_text_dataset(tmp_path / "added", [*texts, *texts[:5]], samples_per_shard=10)
    _refused(_loader(tokenizer_dir, added), state, "-> 5 shards, 45 samples")


def test_changed_reading_settings_are_refused(tokenizer_dir: Path, dataset: Path) -> None:
    state = _saved(tokenizer_dir, dataset, max_samples_per_sequence=4)
    changed = _loader(tokenizer_dir, dataset, max_samples_per_sequence=8)
    _refused(changed, state, "dataset.max_samples_per_sequence: 4 -> 8")
    _refused(_loader(tokenizer_dir, dataset, seed_offset=1), state, "seed_offset: 0 -> 1")


def test_a_changed_num_workers_is_refused_before_energon_asserts(
    tokenizer_dir: Path, dataset: Path
) -> None:
    state0 = _saved(tokenizer_dir, dataset)
    _refused(_loader(tokenizer_dir, dataset, num_workers=2), state0, "num_workers: 0 -> 2")
    state2 = _saved(tokenizer_dir, dataset, num_workers=2)
    message = _refused(_loader(tokenizer_dir, dataset), state2, "num_workers: 2 -> 0")
    assert "cannot be accepted" in message


def test_a_changed_world_size_is_refused(tokenizer_dir: Path, dataset: Path) -> None:
    """Each rank's state is its share of a world: restored into another world size, refused."""
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    def ranked(world_size: int) -> Any:
        worker_config = WorkerConfig(rank=0, world_size=world_size, num_workers=0)
        return get_savable_loader(
            get_train_dataset(
                str(dataset),
                worker_config=worker_config,
                batch_size=None,
                shuffle_buffer_size=None,
                max_samples_per_sequence=None,
                packing_buffer_size=8,
                task_encoder=LLMPackingTaskEncoder(tokenizer_dir, pack_size=PACK),
                repeat=False,
            )
        )

    loader = ranked(1)
    next(iter(loader))
    _refused(ranked(2), loader.save_state_rank(), "world_size: 1 -> 2")


def test_a_state_saved_before_the_new_entries_is_compared_on_what_it_holds() -> None:
    """States saved by an earlier energon-pack lack ``fingerprint_format`` and the new entries:
    those they hold are still compared, the ones they lack are not (no false refusal)."""
    from energon_pack.energon._restore_check import FINGERPRINT_FORMAT, changes

    now = {
        "fingerprint_format": FINGERPRINT_FORMAT,
        "packing.pack_size": "64",
        "dataset.shards": "x",
    }
    old = {"packing.pack_size": "64"}
    assert changes(old, now, frozenset()) == []
    assert changes({"packing.pack_size": "48"}, now, frozenset()) == ["packing.pack_size: 48 -> 64"]
    new = {"fingerprint_format": FINGERPRINT_FORMAT, "packing.pack_size": "64"}
    assert changes(new, now, frozenset()) == ["dataset.shards: (absent) -> x"]
    assert changes(new, now, frozenset({"dataset"})) == []
