# SPDX-License-Identifier: Apache-2.0
"""The benchmark scripts (tests/benchmarks/, not collected) still import names that exist.

Each script is parsed, not run: every ``import energon_pack...`` / ``from energon_pack... import X``
(and ``energon_pack_tools``), at top level or inside functions, must resolve.
"""

import ast
import importlib
import itertools
import re
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parent / "benchmarks").glob("*.py"))
OURS = ("energon_pack", "energon_pack_tools")


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def unresolved(source: str) -> list[str]:
    """``line: what`` for each import of our packages in ``source`` that does not resolve."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names if _ours(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module or ""):
            targets = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in targets:
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:
                bad.append(f"{node.lineno}: {module} ({exc})")
                continue
            if name is None or name == "*" or hasattr(mod, name):
                continue
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                bad.append(f"{node.lineno}: {module}.{name}")
    return bad


def test_scripts_found():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_imports_resolve(script: Path):
    assert unresolved(script.read_text()) == []


def test_a_renamed_name_is_caught():
    source = "def f():\n    from energon_pack.algorithms import build_packing_dataset\n"
    assert unresolved(source) == ["2: energon_pack.algorithms.build_packing_dataset"]


DATA = Path(__file__).parent / "benchmarks" / "data"


def _benchmark_module(name: str, path: Path):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_fresh_clone_has_lengths_for_the_benchmarks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the full manpages lengths (a clone with no shared/ in or beside it), the
    benchmarks read the sample shipped in the repository; its README's figures are the
    sample's."""
    import shutil

    import numpy as np

    clone = tmp_path / "outer" / "clone" / "tests" / "benchmarks"
    shutil.copytree(DATA, clone / "data")
    shutil.copy(DATA.parent / "_lengths.py", clone)
    lengths = _benchmark_module("_lengths", clone / "_lengths.py")
    assert not lengths.FULL_LENGTHS.exists()
    assert lengths.DEFAULT_LENGTHS == clone / "data" / "manpages-sample.lengths.txt"
    assert "reading the 4,000-length sample" in capsys.readouterr().err
    sample = np.loadtxt(lengths.DEFAULT_LENGTHS, dtype=np.int64)
    assert sample.size == 4000 and sample.min() > 0
    readme = " ".join((DATA / "README.md").read_text().split())
    p90 = round(float(np.percentile(sample, 90)))
    said = f"Median {np.median(sample):g} tokens, p90 {p90:,}, max {sample.max():,}"
    assert said in readme


def test_the_shipped_sample_is_what_make_sample_draws() -> None:
    make = _benchmark_module("make_sample", DATA / "make_sample.py")
    full = make.HERE.parents[2] / "shared" / "data" / "manpages.lengths.txt"
    full = full if full.exists() else make.HERE.parents[3] / "shared" / "data" / full.name
    if not full.exists():
        pytest.skip(f"the full manpages lengths are not at {full}")
    assert make.sample_text(full) == make.SAMPLE.read_text()


# -- the GPU proof (issue 31 item 3): its CPU dry run, and its GPU-only branches on CPU ------------


@pytest.fixture(scope="module")
def gpu_check():  # noqa: ANN201
    import sys

    spec = importlib.util.spec_from_file_location("gpu_check", DATA.parent / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["gpu_check"]


def _table(report: str, heading: str) -> list[list[str]]:
    """The cells of the Markdown table under ``heading``, header first (separator dropped)."""
    table = lambda line: line.startswith("|")  # noqa: E731
    lines = report.split(heading, 1)[1].splitlines()
    rows = itertools.takewhile(table, itertools.dropwhile(lambda line: not table(line), lines))
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows if "---" not in row]


def test_gpu_check_cpu_dry_run(gpu_check, capsys: pytest.CaptureFixture[str]) -> None:
    """Every route that exists on CPU gives each document its logits alone (sdpa, eager, flex
    uncompiled, flash through the reference kernel, the hybrids through reference kernels);
    torch's varlen_attn says why it did not run; the throughput table has both layouts on the
    same documents; the page is not written."""
    page = gpu_check.PAGE.read_text()
    assert gpu_check.main(["--cpu-dry-run"]) == 0
    report = capsys.readouterr().out
    routes = _table(report, "### Routes: packed vs alone")
    header = "route | dtype | verdict | max diff | bound | leak | kernel that ran"
    assert " | ".join(routes[0]) == header
    assert all(len(row) == len(routes[0]) for row in routes)
    verdicts = {row[0]: row[2] for row in routes[1:] if row[1] == "fp32"}
    assert set(verdicts) == {route.name for route in gpu_check.ROUTES}
    on_cpu = {name: v for name, v in verdicts.items() if name != "torch varlen_attn"}
    assert on_cpu == dict.fromkeys(on_cpu, "PASS"), on_cpu
    assert verdicts["torch varlen_attn"] == "SKIPPED (needs CUDA)"
    for row in routes[1:]:
        if row[2] == "PASS":
            diff, bound, leak = (float(x) for x in row[3:6])
            assert diff <= bound < leak
    speed = _table(report, "### Training throughput: packed vs padded")
    assert [row[:2] for row in speed[1:]] == [["sdpa", "packed"], ["sdpa", "padded"]]
    assert speed[1][3] == speed[2][3]  # the same real tokens
    assert all(float(row[6].replace(",", "")) > 0 for row in speed[1:])
    assert re.search(r"Packed / padded real tokens/s: \*\*\d+\.\d\dx\*\* \(sdpa\)", report)
    assert gpu_check.PAGE.read_text() == page
    assert "No GPU figure exists yet" in page and "python tests/benchmarks/gpu_check.py" in page


def test_gpu_check_workload_is_the_same_documents(gpu_check) -> None:
    packed, padded = gpu_check.workload(gpu_check.GPU)
    rows = [row for step in packed.steps for row in step]
    assert max(map(sum, rows)) <= 2048 and max(len(s) for s in packed.steps) == 4
    assert sorted(n for row in rows for n in row) == sorted(
        n for step in padded.steps for (n,) in step
    )
    assert len(packed.steps) >= 43 and max(n for row in rows for n in row) == 2048  # capped
    assert all(sum(n for (n,) in step) <= 4 * 2048 for step in padded.steps)


def test_gpu_check_gpu_branches_say_why_they_skip(gpu_check) -> None:
    """Without CUDA kernels, the GPU routes are SKIPPED with the reason, never replaced."""
    import torch
    import transformers

    routes = {route.kernel: route for route in gpu_check.ROUTES}
    llama, fp32, bf16 = transformers.LlamaForCausalLM, torch.float32, torch.bfloat16
    with pytest.raises(gpu_check.Skip, match="flash_attn not importable"):
        gpu_check.kernel_route(routes["flash_attn"], bf16, llama, cpu=False)
    with pytest.raises(gpu_check.Skip, match="fp16/bf16 only"):
        gpu_check.kernel_route(routes["torch_varlen"], fp32, llama, cpu=False)
    qwen = transformers.Qwen3NextForCausalLM
    with pytest.raises(gpu_check.Skip, match="fla and causal-conv1d not importable"):
        gpu_check.kernel_route(routes["linear"], bf16, qwen, cpu=False)


def test_gpu_check_torch_varlen_route_gets_the_documents(gpu_check, monkeypatch) -> None:
    """The varlen_attn adapter on CPU, with the package's reference kernel behind torch's
    signature: transformers' flash route hands it each slot as a sequence, causal."""
    import torch
    import transformers
    from torch.nn.attention import varlen

    from energon_pack.attention._flash_reference import varlen_attention

    calls = []

    def fake(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1),
             enable_gqa=False):  # fmt: skip
        calls.append((cu_q.tolist(), window_size, enable_gqa))
        left, right = window_size
        return varlen_attention(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=scale,
                                causal=right == 0, window_size=(left, -1))  # fmt: skip

    monkeypatch.setattr(varlen, "varlen_attn", fake)
    cpu, route = gpu_check.CPU, next(r for r in gpu_check.ROUTES if r.kernel == "torch_varlen")
    with gpu_check.torch_varlen(transformers.LlamaForCausalLM):
        model = gpu_check.build(route, cpu, torch.float32)
        gen = torch.Generator().manual_seed(1)
        batch, docs = gpu_check.pack(cpu.rows, 97, gen, cpu.pack_size)
        diff, leak, _ = gpu_check.packed_vs_alone(model, route.impl, batch, docs, torch.float32)
    assert diff <= 1e-5 < leak
    assert ([0, 20, 34, 41, 68], (-1, 0), True) in calls  # rows [20, 12 + 2 pad], [7, 3 + 24]
    assert all(window == (-1, 0) and gqa for _, window, gqa in calls)


def test_gpu_check_writes_results_and_status(gpu_check, tmp_path: Path, monkeypatch) -> None:
    """A GPU run replaces the page's results and its no-GPU notice, and keeps the rest."""
    page = tmp_path / "gpu.md"
    page.write_text(gpu_check.PAGE.read_text())
    monkeypatch.setattr(gpu_check, "PAGE", page)
    gpu_check.write_page("- device: H100\n\n| route |\n")
    text = page.read_text()
    head = gpu_check.PAGE.read_text().split("## What the columns mean")[0].split("<!-- /status")[1]
    assert "No GPU figure exists yet" not in text and "measured by the script on a GPU" in text
    assert text.endswith("## Results\n\n- device: H100\n\n| route |\n")
    assert head in text and "No GPU run yet" not in text


def test_gpu_check_fails_a_route_that_leaks(gpu_check, monkeypatch) -> None:
    """The route check has teeth: kwargs without the document mask and reset positions FAIL."""
    import torch

    from energon_pack.samples import PackedTextBatch

    build = PackedTextBatch.hf_kwargs
    monkeypatch.setattr(
        PackedTextBatch,
        "hf_kwargs",
        lambda self, *a, **kw: {"input_ids": build(self, *a, **kw)["input_ids"]},
    )
    sdpa = next(r for r in gpu_check.ROUTES if r.kernel == "sdpa")
    result = gpu_check.check_route(sdpa, torch.float32, gpu_check.CPU)
    assert result.verdict == "FAIL" and result.diff == result.leak > result.bound


@pytest.mark.slow
def test_the_loader_benchmark_runs_and_every_loader_delivers_the_same_tokens(
    tmp_path: Path,
) -> None:
    """``loader_vs_energon.py`` on 24 documents, one round, tokenizer split: the five loaders
    deliver the same real tokens, and the parts add up to the whole-loader estimate; with
    ``--interleave`` (and a tokenizer clock per loader) the loaders run at once and still deliver
    the same tokens."""
    import os
    import subprocess
    import sys

    script = Path(__file__).parent / "benchmarks" / "loader_vs_energon.py"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

    def run(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-W", "ignore", str(script), "--docs", "24", "--buffer", "8", *args],
            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=True,
        ).stdout  # fmt: skip

    def table(out: str, names: list[str], columns: int) -> dict[str, list[str]]:
        """The rows of ``names`` in the table of ``columns`` columns."""
        rows = [line.split() for line in out.splitlines()]
        return {
            row[0]: row for row in rows if row[:1] in [[n] for n in names] and len(row) == columns
        }

    loaders = ["plain", "energon-pack", "carry-over", "plain-labels", "naive-pack"]
    out = run("--rounds", "1", "--split", "--read", "position_ids", "--loaders", ",".join(loaders))
    rows = table(out, loaders, 13)
    assert sorted(rows) == sorted(loaders)
    assert len({row[1] for row in rows.values()}) == 1, rows  # the same real tokens
    assert int(rows["plain"][1]) > 0
    assert "whole loader from the parts" in out
    assert "ratios to plain-labels" in out

    # --interleave: the same loaders at once, batch by batch; the same real tokens again
    mixed_names = ["plain", "energon-pack", "carry-over"]
    out = run("--rounds", "1", "--interleave", "--split", "--loaders", ",".join(mixed_names))
    mixed = table(out, mixed_names, 10)
    assert sorted(mixed) == sorted(mixed_names), out
    assert {row[1] for row in mixed.values()} == {rows["plain"][1]}  # the same real tokens
    assert float(mixed["plain"][4]) == 1.0 and float(mixed["energon-pack"][4]) > 0
    parts = table(out, mixed_names, 5)  # each loader's own tokenizer clock
    assert sorted(parts) == sorted(mixed_names), out
    assert float(parts["plain"][2]) == 1.0 and float(parts["energon-pack"][1]) > 0
