# SPDX-License-Identifier: Apache-2.0
"""The task encoder ``energon-pack analyze --task`` runs, built from the command's options.

``text``, ``sft``, ``captioning``, ``vqa`` or ``conversation`` (the media tasks load
``--processor DIR``, a local transformers processor directory, and the family's placeholder
tokens), or ``--encoder module:Class`` with ``--encoder-args FILE`` / ``--encoder-arg
NAME=VALUE`` for your own ``PackingTaskEncoder`` subclass. See docs/howto/buffer-size.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import click

from energon_pack.algorithms import PackingSpec
from energon_pack_tools.cli._processors import load_processor, tokenizer_argument

__all__ = [
    "MEDIA_TASKS",
    "TASKS",
    "build_encoder",
    "check_sample_type",
    "encoder_args",
    "load_encoder",
    "load_processor",
    "reading_tasks",
]

#: ``--task`` -> the energon sample classes its encoder reads (``CrudeWebdataset``: cooked).
TASKS: dict[str, tuple[str, ...]] = {
    "text": ("TextSample", "CrudeWebdataset"),
    "sft": ("CrudeWebdataset",),
    "captioning": ("CaptioningSample",),
    "vqa": ("VQASample", "VidQASample"),
    "conversation": ("CrudeWebdataset", "VQASample", "VidQASample", "InterleavedSample"),
}
#: Tasks whose documents hold images or videos (they need ``--processor``).
MEDIA_TASKS = ("captioning", "vqa", "conversation")

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def check_sample_type(dataset: Path, task: str) -> None:
    """Refuse a webdataset whose sample type ``task``'s encoder cannot read, naming the task
    that can (``--task text`` on a VQASample dataset -> use ``--task vqa``). Other datasets
    (JSONL, metadatasets) are left to the loader."""
    meta = dataset / ".nv-meta" / "dataset.yaml"
    if not meta.is_file():
        return
    import yaml

    spec = yaml.safe_load(meta.read_text()) or {}
    sample_type = spec.get("sample_type", spec) if isinstance(spec, dict) else {}
    name = sample_type.get("__class__") if isinstance(sample_type, dict) else None
    if name is None or name in TASKS[task]:
        return
    fits = [t for t, names in TASKS.items() if name in names]
    hint = f"use --task {' or '.join(fits)}" if fits else "no --task reads it"
    raise click.UsageError(
        f"{dataset} holds {name} samples, which --task {task} does not read; {hint}."
    )


def reading_tasks(sample: Any, task: str) -> str:
    """The hint for a sample ``--task task`` failed on: ``use --task sft`` when another task's
    cooker reads this raw sample (a crude JSON record), else what to check."""
    import energon_pack.task_encoders as te

    cooks = {
        "text": te.LLMPackingTaskEncoder,
        "sft": te.SFTPackingTaskEncoder,
        "conversation": te.ConversationPackingTaskEncoder,
    }
    fits = []
    if isinstance(sample, dict) and "json" in sample:
        for name, cls in cooks.items():
            try:
                cls.cookers[0].cook(sample)
            except Exception:  # noqa: BLE001 - any failure: this task does not read it
                continue
            fits.append(name)
    fits = [t for t in fits if t != task]
    if fits:
        return f"use --task {' or '.join(fits)}."
    return "check the --task (or --encoder) and the dataset (`energon info`)."


def _tokenizer_dir(task: str, tokenizer: Path | None, processor: Path | None) -> Path:
    """``--tokenizer``, or for the media tasks the processor directory when it has one."""
    if tokenizer is not None:
        return tokenizer
    if processor is not None and any((processor / f).is_file() for f in _TOKENIZER_FILES):
        return processor
    where = f"; {processor} holds no tokenizer" if processor is not None else ""
    raise click.UsageError(f"--task {task} needs --tokenizer DIR{where}.")


def build_encoder(
    task: str,
    spec: PackingSpec,
    *,
    tokenizer: Path | None,
    processor: Path | None,
    trust_remote_code: bool = False,
) -> tuple[Any, list[str]]:
    """The packing task encoder for ``task`` with ``spec``, and notes to print.

    Raises:
        click.UsageError: a missing or misplaced ``--processor`` / ``--tokenizer``, or a
            directory that needs remote code without ``trust_remote_code``.
        ValueError: the tokenizer lacks a placeholder token, and the like (from the encoder).
    """
    import energon_pack.task_encoders as te
    from energon_pack.encoding import vision_family

    if task not in MEDIA_TASKS:
        if processor is not None:
            raise click.UsageError(
                f"--processor is for --task {'/'.join(MEDIA_TASKS)}; --task {task} has no media."
            )
        cls = te.LLMPackingTaskEncoder if task == "text" else te.SFTPackingTaskEncoder
        tok = tokenizer_argument(_tokenizer_dir(task, tokenizer, None), trust_remote_code)
        return cls(tok, config=spec, log_every=0), []
    if processor is None:
        raise click.UsageError(
            f"--task {task} needs --processor DIR (a local transformers processor directory "
            "with preprocessor_config.json) to count image and video tokens."
        )
    image_processor, video_processor, notes = load_processor(
        processor, trust_remote_code=trust_remote_code
    )
    tok = tokenizer_argument(_tokenizer_dir(task, tokenizer, processor), trust_remote_code)
    tokens = vision_family(image_processor).default_tokens
    if task == "captioning":
        return te.CaptioningPackingTaskEncoder(
            tok, image_processor, config=spec, log_every=0, **tokens
        ), notes
    cls = te.VQAPackingTaskEncoder if task == "vqa" else te.ConversationPackingTaskEncoder
    encoder = cls(
        tok, image_processor, video_processor=video_processor, config=spec, log_every=0, **tokens
    )
    return encoder, notes


def encoder_args(path: Path | None, pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--encoder-args FILE`` (JSON or YAML mapping) updated by ``--encoder-arg NAME=VALUE``
    (values read as YAML: ``pack=512`` -> ``{"pack": 512}``)."""
    import yaml

    args: dict[str, Any] = {}
    if path is not None:
        try:
            args = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise click.UsageError(f"--encoder-args {path}: cannot read it ({exc}).") from exc
        if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
            raise click.UsageError(
                f"--encoder-args {path}: expected a mapping of argument names to values "
                '(JSON {"name": value} or YAML name: value), got '
                f"{type(args).__name__}."
            )
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise click.UsageError(f"--encoder-arg {pair!r}: write NAME=VALUE, e.g. repeat=2.")
        args[name] = yaml.safe_load(value) if value else ""
    return args


def load_encoder(
    ref: str,
    args: dict[str, Any],
    spec: PackingSpec,
    *,
    tokenizer: Path | None,
    processor: Path | None,
    trust_remote_code: bool = False,
) -> tuple[Any, list[str]]:
    """``--encoder module:Class``: the user's ``PackingTaskEncoder`` subclass, built with
    ``args``, ``tokenizer=`` / ``image_processor=`` (from the options) and ``config=spec``.

    Raises:
        click.UsageError: a bad reference, a module that does not import, a class that is not a
            ``PackingTaskEncoder``, a packing option given as an argument, a failed constructor.
    """
    from energon_pack.task_encoders import PackingTaskEncoder

    module_name, sep, name = ref.partition(":")
    if not (sep and module_name and name):
        raise click.UsageError(
            f"--encoder {ref!r}: write module:Class, e.g. my_encoders:CodeTaskEncoder (with "
            "my_encoders.py in the current folder or on PYTHONPATH)."
        )
    if os.getcwd() not in sys.path:  # as `python -m` does: the user's module next to them
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.UsageError(
            f"--encoder {ref}: cannot import {module_name!r} ({exc}); run from the folder "
            f"that holds {module_name.replace('.', '/')}.py or add it to PYTHONPATH."
        ) from exc
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, PackingTaskEncoder)):
        what = "not defined" if cls is None else "not a PackingTaskEncoder subclass"
        raise click.UsageError(
            f"--encoder {ref}: {name} is {what} in {module.__file__}; name a subclass of "
            "energon_pack.task_encoders.PackingTaskEncoder."
        )
    clash = sorted(set(args) & {f.name for f in dataclasses.fields(PackingSpec)})
    if clash:
        flags = ", ".join("--" + c.replace("_", "-") for c in clash)
        raise click.UsageError(f"--encoder-arg(s) {', '.join(clash)}: give them as {flags}.")
    kwargs, notes = dict(args), []
    if tokenizer is not None:
        kwargs.setdefault("tokenizer", tokenizer_argument(tokenizer, trust_remote_code))
    if processor is not None:
        image_processor, video_processor, notes = load_processor(
            processor, trust_remote_code=trust_remote_code
        )
        kwargs.setdefault("image_processor", image_processor)
        if video_processor is not None:
            kwargs.setdefault("video_processor", video_processor)
    try:
        return cls(**kwargs, config=spec, log_every=0), notes
    except TypeError as exc:
        raise click.UsageError(
            f"--encoder {ref}: {name}({', '.join(kwargs)}) failed: {exc}; give its arguments "
            "with --encoder-arg NAME=VALUE or --encoder-args FILE (JSON/YAML)."
        ) from exc
