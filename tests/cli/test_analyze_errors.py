# SPDX-License-Identifier: Apache-2.0
"""``analyze`` on the inputs a new user gets wrong, and ``--plot``: one clear line each, the
report never lost to a picture."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from energon_pack_tools import make_text_dataset, synthetic_texts
from energon_pack_tools._analysis import FIRST_FAILURES
from energon_pack_tools.cli._analyze_command import command


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts = synthetic_texts(60, seed=3, min_words=1, max_words=30)
    return make_text_dataset(tmp_path_factory.mktemp("ds") / "data", texts, samples_per_shard=20)


def _run(data: Path, tokenizer: Path, *extra: str) -> object:
    args = [str(data), "--tokenizer", str(tokenizer), "--pack-size", "32", "--buffer-size", "4"]
    return CliRunner().invoke(command, [*args, *extra])


def _error_line(res: object) -> str:
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, res.output
    return errors[0]


def test_deleted_shard_names_it_and_the_fix(tmp_path: Path, tokenizer_dir: Path) -> None:
    data = make_text_dataset(tmp_path / "data", synthetic_texts(30, seed=1), samples_per_shard=10)
    (data / "shard_000001.tar").unlink()
    line = _error_line(_run(data, tokenizer_dir))
    assert f"{data}: shard shard_000001.tar is missing" in line
    assert "restore it, or rebuild the dataset" in line


def test_a_directory_that_is_not_a_dataset_suggests_make_dataset(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("some text")
    line = _error_line(_run(tmp_path / "texts", tokenizer_dir))
    assert f"{tmp_path / 'texts'} is not an energon dataset" in line
    assert f"energon-pack make-dataset OUT {tmp_path / 'texts'}" in line


def test_an_unprepared_jsonl_suggests_prepare(tmp_path: Path, tokenizer_dir: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"text": "x"}) + "\n")
    line = _error_line(_run(raw, tokenizer_dir))
    assert "is not prepared (no raw.jsonl.idx)" in line and f"energon prepare {raw}" in line


def test_a_tokenizer_directory_without_a_tokenizer_is_named(tmp_path: Path, dataset: Path) -> None:
    tok = tmp_path / "not_a_tokenizer"
    tok.mkdir()
    (tok / "config.json").write_text("{}")  # a model directory without tokenizer files
    line = _error_line(_run(dataset, tok))
    assert f"{tok} holds no tokenizer: expected tokenizer.json or tokenizer_config.json" in line
    assert "found config.json" in line


def test_a_plot_into_a_missing_folder_is_refused_before_the_run(
    tmp_path: Path, dataset: Path, tokenizer_dir: Path
) -> None:
    res = _run(dataset, tokenizer_dir, "--plot", str(tmp_path / "no" / "such" / "dir.png"))
    assert res.exit_code == 2, res.output
    assert "recommended buffer" not in res.output  # nothing ran
    assert f"the folder {tmp_path / 'no' / 'such'} does not exist; create it" in res.output


def test_without_matplotlib_it_says_pip_install(
    tmp_path: Path, dataset: Path, tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes ``import matplotlib`` raise ImportError, as it does
    # where matplotlib is not installed.
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = _run(dataset, tokenizer_dir, "--json", "--plot", str(tmp_path / "p.png"))
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["packs"] > 0  # stdout stays one JSON object
    assert "warning: no plot written" in res.stderr and "pip install matplotlib" in res.stderr
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize(
    ("fixture", "task", "hint"),
    [("sft_dataset", "text", "use --task sft."), ("jsonl_text_dataset", "sft", "use --task text.")],
)
def test_a_wrong_task_on_a_crude_dataset_is_one_line_naming_the_task(
    fixture: str, task: str, hint: str, tokenizer_dir: Path, request: pytest.FixtureRequest
) -> None:
    # Both datasets are CrudeWebdataset, so the sample type does not tell; every record fails
    # the task's cooker, which used to print a traceback and the sample for each of them.
    data = request.getfixturevalue(fixture).path
    res = _run(data, tokenizer_dir, "--task", task)
    line = _error_line(res)
    assert res.output.count("\n") <= 2, res.output  # energon's progress bar, the error
    assert f"the first {FIRST_FAILURES} samples all failed with --task {task}, e.g. 0: " in line
    assert line.endswith(hint)


def test_a_few_failing_samples_are_reported_without_tracebacks(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    from energon_pack_tools import make_jsonl_dataset

    texts = synthetic_texts(30, seed=5, min_words=1, max_words=20)
    records: list[dict] = [{"text": t} for t in texts]
    records[3] = records[17] = {"prompt": "not", "response": "text"}
    data = make_jsonl_dataset(tmp_path / "mixed.jsonl", records)
    res = _run(data, tokenizer_dir, "--json")
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and "Except " not in res.output
    out = json.loads(res.stdout)
    assert (out["samples_out"], out["skipped"]) == (28, 2)
    assert [s["key"] for s in out["skipped_samples"]] == ["3", "17"]
    assert "has no field 'text'" in out["skipped_samples"][0]["reason"]
