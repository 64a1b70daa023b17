# SPDX-License-Identifier: Apache-2.0
"""No remote code: a tokenizer or processor directory whose config has an ``auto_map`` is
refused by the product (``load_tokenizer``, ``LLMPackingTaskEncoder(dir)``) and by ``analyze``,
naming the file and the opt-in, and its Python module never runs; the explicit opt-in runs it.

The directories are real: the session tokenizer saved with ``save_pretrained``, plus a
``remote_tok.py`` that writes a marker file when imported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from energon_pack_tools import make_text_dataset, synthetic_texts
from energon_pack_tools.cli._analyze_command import command


def _remote(dir_: Path, source: Path, config: str, auto: dict[str, Any]) -> Path:
    """``source`` copied to ``dir_`` with ``auto_map`` in ``config`` and the module it names."""
    shutil.copytree(source, dir_)
    file = dir_ / config
    settings = json.loads(file.read_text()) if file.is_file() else {}
    settings["auto_map"] = auto
    if config == "tokenizer_config.json":
        settings["tokenizer_class"] = "RemoteTokenizer"
    file.write_text(json.dumps(settings))
    marker = dir_.parent / f"{dir_.name}.RAN"
    (dir_ / "remote_tok.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "from transformers import PreTrainedTokenizerFast\n\n\n"
        "class RemoteTokenizer(PreTrainedTokenizerFast):\n    pass\n"
    )
    return dir_


def _ran(dir_: Path) -> bool:
    return (dir_.parent / f"{dir_.name}.RAN").exists()


@pytest.fixture()
def remote_tokenizer(tmp_path: Path, tokenizer_dir: Path) -> Path:
    auto = {"AutoTokenizer": [None, "remote_tok.RemoteTokenizer"]}
    return _remote(tmp_path / "tok", tokenizer_dir, "tokenizer_config.json", auto)


@pytest.fixture()
def modules_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """transformers copies trusted remote modules here instead of ~/.cache."""
    import transformers.dynamic_module_utils as dmu

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    return tmp_path / "modules"


def test_load_tokenizer_refuses_remote_code_naming_file_and_opt_in(
    remote_tokenizer: Path,
) -> None:
    from energon_pack import LLMPackingTaskEncoder
    from energon_pack.encoding import load_tokenizer

    for load in (load_tokenizer, lambda p: LLMPackingTaskEncoder(p, pack_size=32)):
        with pytest.raises(ValueError) as err:
            load(remote_tokenizer)
        message = str(err.value)
        assert f"{remote_tokenizer} needs remote code: tokenizer_config.json has an auto_map " in (
            message
        )
        assert "(AutoTokenizer)" in message and "trust_remote_code=True" in message
    assert not _ran(remote_tokenizer)


def test_load_tokenizer_runs_remote_code_only_when_opted_in(
    remote_tokenizer: Path, modules_cache: Path
) -> None:
    from energon_pack.encoding import load_tokenizer

    tok = load_tokenizer(remote_tokenizer, trust_remote_code=True)
    assert type(tok).__name__ == "RemoteTokenizer" and _ran(remote_tokenizer)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts = synthetic_texts(12, seed=3, min_words=1, max_words=20)
    return make_text_dataset(tmp_path_factory.mktemp("ds") / "data", texts, samples_per_shard=6)


def _analyze(dataset: Path, *args: str) -> Any:
    base = [str(dataset), "--pack-size", "32", "--buffer-size", "4", "--no-progress"]
    return CliRunner().invoke(command, [*base, *args])


def test_analyze_refuses_a_remote_code_tokenizer_and_takes_the_flag(
    dataset: Path, remote_tokenizer: Path, modules_cache: Path
) -> None:
    res = _analyze(dataset, "--tokenizer", str(remote_tokenizer))
    assert res.exit_code == 2, res.output
    assert f"--tokenizer {remote_tokenizer} needs remote code" in res.output
    assert "--trust-remote-code" in res.output and not _ran(remote_tokenizer)
    res = _analyze(dataset, "--tokenizer", str(remote_tokenizer), "--trust-remote-code")
    assert res.exit_code == 0, res.output
    assert _ran(remote_tokenizer)


def test_analyze_refuses_a_remote_code_processor(
    tmp_path: Path, dataset: Path, processor_dir: Path
) -> None:
    auto = {"AutoImageProcessor": "remote_tok.RemoteTokenizer"}
    remote = _remote(tmp_path / "proc", processor_dir, "preprocessor_config.json", auto)
    res = _analyze(dataset, "--task", "captioning", "--processor", str(remote))
    assert res.exit_code == 2, res.output
    assert f"--processor {remote} needs remote code: preprocessor_config.json" in res.output
    assert "(AutoImageProcessor)" in res.output and not _ran(remote)
