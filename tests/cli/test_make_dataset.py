# SPDX-License-Identifier: Apache-2.0
"""``energon-pack make-dataset``: text/JSONL files -> a real energon dataset, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from read_back import read_back

from energon_pack_tools.cli._make_dataset_command import (
    DocumentCounts,
    command,
    iter_documents,
    read_documents,
)


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
    assert sorted(s.text for s in read_back(out)) == sorted(
        ["first document\nwith two lines", "second", "third"]
    )


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


def test_iter_documents_is_lazy_and_counts(tmp_path: Path) -> None:
    # Line 4 is bad; a reader that parsed the whole file first would fail before yielding.
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one"}\n{"text": ""}\n{"text": "two"}\n{"text": 4}\n')
    counts = DocumentCounts()
    docs = iter_documents([src], counts=counts)
    assert next(docs) == "one"
    assert next(docs) == "two"  # line 2 is the empty string: skipped and counted
    assert counts == DocumentCounts(documents=2, empty=1)
    with pytest.raises(ValueError, match=r"a\.jsonl:4: field 'text' is int"):
        next(docs)


def test_iter_documents_matches_read_documents(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.md").write_text("markdown doc")
    _jsonl(tmp_path / "d" / "y.jsonl", [{"text": "j1"}, {"text": " "}, {"text": "j2"}])
    inputs = [tmp_path / "d", _jsonl(tmp_path / "z.jsonl", [{"text": "z"}])]
    counts = DocumentCounts()
    streamed = list(iter_documents(inputs, counts=counts))
    # x.md < y.jsonl inside d/, then z.jsonl; " " is whitespace-only, so skipped.
    assert streamed == ["markdown doc", "j1", "j2", "z"]
    assert read_documents(inputs) == (streamed, 1) and counts.empty == 1


def _good_then_bad(path: Path, good: int) -> Path:
    path.write_text("".join(f'{{"text": "doc {i}"}}\n' for i in range(good)) + "{oops\n")
    return path


@pytest.mark.parametrize("out_name", ["out", "new/deeper/out"])
def test_a_bad_line_midway_removes_the_partial_dataset(tmp_path: Path, out_name: str) -> None:
    # 25 good lines at 4 per shard: 7 shards are on disk when line 26 fails. The command must
    # remove every directory it created (for "new/deeper/out" that is "new").
    bad = _good_then_bad(tmp_path / "big.jsonl", good=25)
    out = tmp_path / out_name
    res = CliRunner().invoke(command, [str(out), str(bad), "--samples-per-shard", "4"])
    assert res.exit_code == 1
    assert "big.jsonl:26: not valid JSON" in res.output
    assert not (tmp_path / out_name.split("/")[0]).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.jsonl"]


def test_a_bad_line_midway_empties_an_existing_empty_out(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()  # allowed: OUT may exist if it is empty
    good = _jsonl(tmp_path / "good.jsonl", [{"text": f"g{i}"} for i in range(5)])
    bad = _good_then_bad(tmp_path / "bad.jsonl", good=3)
    res = CliRunner().invoke(
        command, [str(tmp_path / "out"), str(good), str(bad), "--samples-per-shard", "2"]
    )
    # The second file fails at its 4th line, after 8 documents (4 shards) were written.
    assert res.exit_code == 1 and "bad.jsonl:4: not valid JSON" in res.output
    assert (tmp_path / "out").is_dir() and not any((tmp_path / "out").iterdir())


def test_streamed_cli_shards_match_the_list_writer(tmp_path: Path) -> None:
    from energon_pack_tools import make_text_dataset

    records = [{"text": f"document {i} " + "x" * (i % 7)} for i in range(11)]
    src = _jsonl(tmp_path / "a.jsonl", records)
    res = CliRunner().invoke(command, [str(tmp_path / "cli"), str(src), "--samples-per-shard", "3"])
    assert res.exit_code == 0, res.output
    assert "wrote 11 documents (0 empty skipped) in 4 shards" in res.output  # ceil(11 / 3)
    ref = make_text_dataset(tmp_path / "ref", [r["text"] for r in records], samples_per_shard=3)
    cli_shards = {p.name: p.read_bytes() for p in (tmp_path / "cli").glob("*.tar")}
    assert len(cli_shards) == 4
    assert cli_shards == {p.name: p.read_bytes() for p in ref.glob("*.tar")}
