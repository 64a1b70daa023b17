# SPDX-License-Identifier: Apache-2.0
"""``energon-pack make-dataset --task sft``: prompt/response JSONL -> a dataset that
SFTPackingTaskEncoder reads (checked by energon reading it back and by ``analyze --task sft``),
and every bad line as one error naming file:line and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from megatron.energon import Cooker, DefaultTaskEncoder
from read_back import read_back

from energon_pack.task_encoders._sft import cook_prompt_response
from energon_pack_tools.cli import main

PAIRS = [
    {"prompt": "the cat", "response": "a dog", "id": 1},
    {"prompt": "of the", "response": "to a", "system": "be brief"},
    {"prompt": "a", "response": "the the the the"},
]


class CookOnly(DefaultTaskEncoder):
    cookers = (Cooker(cook_prompt_response),)


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, ["make-dataset", *args])


def test_prompt_response_jsonl_becomes_an_sft_dataset(tmp_path: Path, tokenizer_dir: Path) -> None:
    src = tmp_path / "sft.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in PAIRS))
    out = tmp_path / "sft_data"
    res = _run(str(out), str(src), "--task", "sft", "--samples-per-shard", "2")
    assert res.exit_code == 0, res.output
    assert "wrote 3 prompt/response pairs (1 with a system prompt) in 2 shards" in res.output
    assert f"next: energon-pack analyze {out} --task sft" in res.output
    samples = read_back(out, CookOnly())
    assert [(s.prompt, s.response, s.system) for s in samples] == [
        ("the cat", "a dog", None),
        ("of the", "to a", "be brief"),
        ("a", "the the the the", None),
    ]
    args = ["analyze", str(out), "--task", "sft", "--tokenizer", str(tokenizer_dir)]
    res = CliRunner().invoke(main, [*args, "--pack-size", "64", "--buffer-size", "4", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["samples_out"] == 3


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"instruction": "q", "output": "a"}, "sft.jsonl:2: no string field 'prompt' (fields: "
         "instruction, output); an SFT line is {\"prompt\": \"...\", \"response\": \"...\"} "
         "(optional \"system\"): rename the fields (e.g. instruction -> prompt, output -> "
         "response)"),
        ({"prompt": "q", "response": 7}, "sft.jsonl:2: 'response' is int, not a string"),
        ({"prompt": "q"}, "sft.jsonl:2: no string field 'response' (fields: prompt)"),
    ],
)  # fmt: skip
def test_bad_lines_name_file_line_and_fix(tmp_path: Path, line: dict, message: str) -> None:
    src = tmp_path / "sft.jsonl"
    src.write_text(json.dumps(PAIRS[0]) + "\n" + json.dumps(line) + "\n")
    res = _run(str(tmp_path / "out"), str(src), "--task", "sft")
    assert res.exit_code == 1 and not (tmp_path / "out").exists()
    assert message.replace("sft.jsonl", str(src)) in res.output


def test_sft_data_given_to_the_text_task_points_to_sft(tmp_path: Path) -> None:
    src = tmp_path / "sft.jsonl"
    src.write_text(json.dumps(PAIRS[0]) + "\n")
    res = _run(str(tmp_path / "out"), str(src))
    assert "no field 'text' (fields: id, prompt, response); prompt/response pairs are SFT " in (
        res.output
    )
    assert "pass --task sft." in res.output
    (tmp_path / "a.txt").write_text("hi")
    res = _run(str(tmp_path / "out"), str(tmp_path / "a.txt"), "--task", "sft")
    assert res.exit_code == 2 and "--task sft reads .jsonl files" in res.output
