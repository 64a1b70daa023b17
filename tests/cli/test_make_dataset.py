# SPDX-License-Identifier: Apache-2.0
"""``energon-pack make-dataset``: text/JSONL files -> a real energon dataset, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from energon_pack.cli.make_dataset import command, read_documents


def _read_back(path: Path) -> list[str]:
    """Every sample's text, read by energon's own loader (one epoch, default task encoder)."""
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset

    ds = get_train_dataset(
        str(path),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )
    return [sample.text for sample in get_loader(ds)]


def _jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_txt_and_jsonl_become_a_text_sample_dataset(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("first document\nwith two lines")
    _jsonl(src / "b.jsonl", [{"body": "second"}, {"body": ""}, {"body": "third", "id": 3}])
    out = tmp_path / "ds"
    res = CliRunner().invoke(
        command,
        [
            str(out),
            str(src / "a.txt"),
            str(src / "b.jsonl"),
            "--field",
            "body",
            "--samples-per-shard",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    # 3 documents (the empty string is skipped and counted) in ceil(3 / 2) = 2 shards.
    assert "wrote 3 documents (1 empty skipped) in 2 shards" in res.output
    assert sorted(p.name for p in out.glob("*.tar")) == ["shard_000000.tar", "shard_000001.tar"]
    assert (out / ".nv-meta" / "dataset.yaml").exists()
    assert sorted(_read_back(out)) == sorted(["first document\nwith two lines", "second", "third"])


def test_a_directory_contributes_its_files_in_sorted_order(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "z.txt").write_text("z")
    (tmp_path / "d" / "sub" / "a.md").write_text("a")
    (tmp_path / "d" / "ignored.csv").write_text("x,y")
    docs, empty = read_documents([tmp_path / "d"])
    # rglob finds sub/a.md and z.txt; sorted by path: "d/sub/a.md" < "d/z.txt"; .csv is ignored.
    assert (docs, empty) == (["a", "z"], 0)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ('{"text": "ok"}\n{"txt": "no field"}\n', "bad.jsonl:2: no field 'text' (fields: txt)"),
        ('{"text": "ok"}\n[1, 2]\n', "bad.jsonl:2: expected a JSON object per line, got list"),
        ('{"text": 5}\n', "bad.jsonl:1: field 'text' is int, not a string"),
        ('{"text": "ok"}\n\n{"text": \n', "bad.jsonl:3: not valid JSON"),
        ("\n\n", "bad.jsonl: no JSON lines in this file"),
    ],
)
def test_bad_jsonl_names_file_and_line(tmp_path: Path, lines: str, message: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines)
    res = CliRunner().invoke(command, [str(tmp_path / "out"), str(bad)])
    assert res.exit_code == 1
    assert message in res.output
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_empty_inputs_are_errors(tmp_path: Path) -> None:
    empty_txt = tmp_path / "empty.txt"
    empty_txt.write_text("  \n")
    res = CliRunner().invoke(command, [str(tmp_path / "o1"), str(empty_txt)])
    assert res.exit_code == 1 and "empty.txt: the file is empty" in res.output

    only_empty = _jsonl(tmp_path / "blank.jsonl", [{"text": ""}])
    res = CliRunner().invoke(command, [str(tmp_path / "o2"), str(only_empty)])
    assert res.exit_code == 1 and "no non-empty documents" in res.output

    other = tmp_path / "data.csv"
    other.write_text("a,b")
    res = CliRunner().invoke(command, [str(tmp_path / "o3"), str(other)])
    assert res.exit_code == 1 and "unsupported file type '.csv'" in res.output


def test_refuses_a_non_empty_output_directory(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("precious")
    src = _jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    res = CliRunner().invoke(command, [str(tmp_path / "out"), str(src)])
    assert res.exit_code == 1 and "exists and is not empty" in res.output
    assert (tmp_path / "out" / "keep.txt").read_text() == "precious"


@pytest.mark.parametrize("name", ["latin1.txt", "latin1.jsonl"])
def test_non_utf8_file_is_named(tmp_path: Path, name: str) -> None:
    # The bare UnicodeDecodeError says "byte 0xe9 in position 1" but not which of many files.
    bad = tmp_path / name
    bad.write_bytes('{"text": "caf\u00e9"}\n'.encode("latin-1"))
    res = CliRunner().invoke(command, [str(tmp_path / "out"), str(bad)])
    assert res.exit_code == 1
    assert f"{name}: not UTF-8 text" in res.output
