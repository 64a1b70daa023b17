# SPDX-License-Identifier: Apache-2.0
"""``energon-pack analyze`` on a ``blend:`` metadataset (issue 33, point 3): the shares of
tokens, documents and loss tokens each dataset trains on, sample-weighted beside
token-weighted, through the text task's real tokenizer; with packing groups, under each
group's policy (``--packing-group NAME=BUFFER[,ALGORITHM]``)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from energon_pack_tools import WORDS, make_blend_metadataset, make_text_dataset
from energon_pack_tools.cli._analyze_command import command

#: Short chat texts need a larger buffer to fill packs; these runs measure shares.
pytestmark = pytest.mark.filterwarnings("ignore::energon_pack.encoding.SmallPackingBufferWarning")


def _blend(tmp_path: Path, groups: list[str | None] | None = None) -> Path:
    """``chat``: 300 texts of 2..6 words; ``books``: 40 of 60..180 words; blended 1:1 (with
    ``groups``: their ``packing_group`` subflavors)."""
    rng = random.Random(4)

    def texts(n: int, lo: int, hi: int) -> list[str]:
        return [" ".join(rng.choices(WORDS, k=rng.randint(lo, hi))) for _ in range(n)]

    chat = make_text_dataset(tmp_path / "chat", texts(300, 2, 6))
    books = make_text_dataset(tmp_path / "books", texts(40, 60, 180))
    return make_blend_metadataset(tmp_path / "blend.yaml", [(chat, 1.0), (books, 1.0)], groups)


def test_analyze_shows_both_blends_shares(tmp_path: Path, tokenizer_dir: Path) -> None:
    meta = _blend(tmp_path)
    args = [str(meta), "--tokenizer", str(tokenizer_dir), "--pack-size", "256"]
    args += ["--buffer-size", "32", "--blend-tokens", "12000"]
    res = CliRunner().invoke(command, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    chat, books = out["rows"]
    assert (Path(chat["dataset"]).name, Path(books["dataset"]).name) == ("chat", "books")
    assert chat["weight"] == books["weight"] == 0.5
    # Sample-weighted: about 1:1 in documents, the books take most tokens.
    assert abs(chat["samples_documents"] - 0.5) < 0.1 and chat["samples_tokens"] < 0.2, out
    # Token-weighted: 1:1 in tokens (within 3 points over 12k tokens), chat most documents.
    assert abs(chat["size_tokens"] - 0.5) < 0.03 and chat["size_documents"] > 0.8, out
    for run in ("samples", "size"):
        for counter in ("tokens", "documents", "loss_tokens"):
            assert abs(chat[f"{run}_{counter}"] + books[f"{run}_{counter}"] - 1) < 1e-9
    # the table as text (its layout, not its shares: a shorter run)
    text = CliRunner().invoke(command, [*args, "--no-progress", "--blend-tokens", "2000"])
    assert text.exit_code == 0, text.output
    assert "| samples: tokens" in text.stdout and "| tokens:  tokens" in text.stdout
    assert text.stdout.splitlines()[2].startswith("chat")


def test_plot_on_a_blend_is_refused_with_the_fix(tmp_path: Path, tokenizer_dir: Path) -> None:
    meta = _blend(tmp_path)
    args = [
        str(meta),
        "--tokenizer",
        str(tokenizer_dir),
        "--pack-size",
        "256",
        "--buffer-size",
        "8",
    ]
    res = CliRunner().invoke(command, [*args, "--plot", str(tmp_path / "p.png")])
    assert res.exit_code != 0 and "analyze a leaf" in res.output


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`_blend` with ``chat`` in packing group ``chat`` and ``books`` in ``books``."""
    return _blend(tmp_path_factory.mktemp("grouped"), ["chat", "books"])


def test_analyze_a_blend_of_packing_groups_under_their_policies(
    grouped: Path, tokenizer_dir: Path
) -> None:
    """Each group is packed under its --packing-group policy in both runs: ``books`` with a
    buffer of 1 sample gets one document per pack, ``chat`` (buffer 32) many; the rows name
    each dataset's group and the token-weighted run holds 1:1 in tokens."""
    args = [str(grouped), "--tokenizer", str(tokenizer_dir), "--pack-size", "256"]
    args += ["--buffer-size", "16", "--blend-tokens", "12000"]
    groups = ["--packing-group", "chat=32,next_fit", "--packing-group", "books=1"]
    res = CliRunner().invoke(command, [*args, *groups, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    chat, books = out["rows"]
    assert (chat["group"], books["group"]) == ("chat", "books")
    assert abs(chat["size_tokens"] - 0.5) < 0.03 and chat["samples_tokens"] < 0.2, out
    policies = out["packing_groups"]
    assert sorted(policies) == ["books", "chat"]
    assert policies["chat"]["buffer_size"] == 32 and policies["chat"]["algorithm"] == "next_fit"
    assert policies["books"]["buffer_size"] == 1
    for run in ("samples", "size"):
        assert policies["books"][f"{run}_packs"] == policies["books"][f"{run}_documents"] > 0
        assert policies["chat"][f"{run}_documents"] > 5 * policies["chat"][f"{run}_packs"] > 0
        assert sum(p[f"{run}_tokens"] for p in policies.values()) >= 12000
    # without a policy: one buffer, as a loader with no packing_groups would, and a note; then
    # the table as text (its layout, not its shares: shorter runs)
    short = ["--blend-tokens", "2000"]
    one = CliRunner().invoke(command, [*args, *short, "--json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["packing_groups"] == {}
    assert "packed in one buffer" in one.stderr
    text = CliRunner().invoke(command, [*args, *groups, *short, "--no-progress"])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[2].startswith("chat (chat)") and lines[4].startswith("group chat")
    assert "buffer 32, next_fit" in lines[4] and "buffer 1," in lines[5]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("--packing-group chat=32", "--packing-group books=BUFFER"),
        ("--packing-group chat", "NAME=BUFFER[,ALGORITHM]"),
        ("--packing-group chat=32,no_such --packing-group books=1", "no_such"),
        (
            "--packing-group chat=32 --packing-group books=1 --blend-size bytes",
            "use --blend-size tokens",
        ),
    ],
)
def test_a_missing_or_bad_packing_group_is_refused_with_the_fix(
    grouped: Path, tokenizer_dir: Path, options: str, message: str
) -> None:
    args = [str(grouped), "--tokenizer", str(tokenizer_dir), "--pack-size", "256"]
    res = CliRunner().invoke(command, [*args, "--buffer-size", "16", *options.split()])
    assert res.exit_code == 2 and message in res.output, res.output


def test_packing_groups_of_nested_metadatasets_are_read_as_the_loader_reads_them(
    grouped: Path, tmp_path: Path, tokenizer_dir: Path
) -> None:
    """A ``blend:`` of two nested metadatasets: ``inner.yaml`` names the groups on its own
    leaves (``chat`` and ``notes`` in ``chat``), ``books.yaml`` (one dataset) gets ``books``
    from the outer entry's subflavors. analyze reads one row per leaf, with energon's
    flattened weights (3/4 * 1/3, 3/4 * 2/3, 1/4) and each leaf's group, and packs each group
    under its policy: no leaf falls into the default group, in the rows or in the loader's
    packs."""
    rng = random.Random(7)

    def texts(n: int, lo: int, hi: int) -> list[str]:
        return [" ".join(rng.choices(WORDS, k=rng.randint(lo, hi))) for _ in range(n)]

    chat, books = grouped.parent / "chat", grouped.parent / "books"  # :func:`_blend`'s
    notes = make_text_dataset(tmp_path / "notes", texts(60, 8, 20))
    head = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
    (tmp_path / "inner.yaml").write_text(
        head
        + "    blend:\n"
        + f"      - {{weight: 1, path: {chat}, subflavors: {{packing_group: chat}}}}\n"
        + f"      - {{weight: 2, path: {notes}, subflavors: {{packing_group: chat}}}}\n"
    )
    (tmp_path / "books.yaml").write_text(head + f"    path: {books}\n")
    outer = tmp_path / "outer.yaml"
    outer.write_text(
        head
        + "    blend:\n"
        + "      - {weight: 3, path: inner.yaml}\n"
        + "      - {weight: 1, path: books.yaml, subflavors: {packing_group: books}}\n"
    )
    args = [str(outer), "--tokenizer", str(tokenizer_dir), "--pack-size", "256"]
    args += ["--buffer-size", "16", "--blend-tokens", "6000", "--json"]
    groups = ["--packing-group", "chat=32", "--packing-group", "books=1"]
    res = CliRunner().invoke(command, [*args, *groups])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    rows = out["rows"]
    assert [Path(r["dataset"]).name for r in rows] == ["chat", "notes", "books"]
    assert [r["group"] for r in rows] == ["chat", "chat", "books"]
    assert [r["weight"] for r in rows] == pytest.approx([0.25, 0.5, 0.25])
    policies = out["packing_groups"]
    assert sorted(policies) == ["books", "chat"], policies  # no "(default)" group
    for run in ("samples", "size"):
        assert policies["books"][f"{run}_packs"] == policies["books"][f"{run}_documents"] > 0
        assert policies["chat"][f"{run}_documents"] > policies["chat"][f"{run}_packs"] > 0
        assert all(r[f"{run}_documents"] > 0 for r in rows), rows
        assert sum(r[f"{run}_tokens"] for r in rows) == pytest.approx(1)
    # the groups are the nested ones: a policy for only one of them is refused naming the other
    short = CliRunner().invoke(command, [*args, "--packing-group", "chat=32"])
    assert short.exit_code == 2 and "--packing-group books=BUFFER" in short.output
