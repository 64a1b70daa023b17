# SPDX-License-Identifier: Apache-2.0
"""Loading ``--tokenizer`` and ``--processor`` directories for ``energon-pack analyze``, offline
and without remote code: a directory whose configs have an ``auto_map`` is refused, naming the
file, unless ``--trust-remote-code``; transformers is always called with ``trust_remote_code``
as given, so it never prompts (see :mod:`energon_pack.encoding` ``refuse_remote_code``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import click

__all__ = ["load_processor", "tokenizer_argument"]


def load_processor(path: Path, *, trust_remote_code: bool = False) -> tuple[Any, Any, list[str]]:
    """``(processor, video_processor or None, notes)`` from a local processor directory: the
    image processor, or for InternVL, Gemma 3 and PaliGemma it with the tokens per tile or image
    (``image_seq_length``) and ``processor_class``, for Idefics3 and LLaVA the whole processor (see
    :func:`~energon_pack.encoding.vision_family`).

    A directory whose configs ask for remote code is refused unless ``trust_remote_code``
    (``--trust-remote-code``); transformers is always called with it as given, never prompting.

    Raises:
        click.UsageError: no processor config, remote code not opted in, or a processor family
            packing cannot serve.
    """
    from types import SimpleNamespace

    import transformers
    from transformers import AutoImageProcessor

    from energon_pack.encoding import family_for, transformers_class, vision_family

    configs = [path / "preprocessor_config.json", path / "processor_config.json"]
    if not any(c.is_file() for c in configs):
        raise click.UsageError(
            f"--processor {path}: no preprocessor_config.json or processor_config.json; give a "
            "local transformers processor directory (what processor.save_pretrained(DIR) or "
            "image_processor.save_pretrained(DIR) writes)."
        )
    _refuse_remote_code(path, "processor", trust_remote_code)
    remote = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "use_fast" and backend notices
        image_processor = AutoImageProcessor.from_pretrained(str(path), **remote)
    config = json.loads(configs[1].read_text()) if configs[1].is_file() else {}
    name = config.get("processor_class")
    whole = None
    if name is not None and not hasattr(transformers, name):  # a subclass saved as its own name
        from energon_pack.encoding import load_processor as load_images_only

        try:
            whole = load_images_only(path, trust_remote_code=trust_remote_code)
            name = type(whole).__name__
        except ValueError:  # several classes fit (InternVL): the options below decide
            pass
    # InternVL and Gemma 3 save it in processor_config.json, PaliGemma on its image processor
    seq = config.get("image_seq_length", getattr(image_processor, "image_seq_length", None))
    processor = (
        image_processor
        if seq is None
        else SimpleNamespace(
            image_processor=image_processor, image_seq_length=int(seq), processor_class=name
        )
    )
    # LLaVA-NeXT / -OneVision, SmolVLM and Idefics3 (which lays out the tile markers itself):
    # the whole processor, without the video processor that needs torchvision
    if (
        str(name).startswith(("LlavaNext", "LlavaOnevision", "SmolVLM"))
        or "image_seq_len" in config
    ):
        processor = whole or _whole(path, trust_remote_code)
    try:
        vision_family(processor)
        if name:  # the processor the directory names (a subclass: its transformers class) too
            family_for(name, transformers_class(image_processor) or "")
    except ValueError as e:
        raise click.UsageError(f"--processor {path}: {e}") from e
    notes: list[str] = []
    video = None
    if (path / "video_preprocessor_config.json").is_file():
        try:
            from transformers import AutoVideoProcessor

            video = AutoVideoProcessor.from_pretrained(str(path), **remote)
        except ImportError:
            notes.append(
                f"note: {path / 'video_preprocessor_config.json'} needs torchvision (not "
                "installed); video frames go through the image processor, so video token "
                "counts follow its pixel limits."
            )
    return processor, video, notes


def _whole(path: Path, trust_remote_code: bool) -> Any:
    """The directory's processor without its video processor
    (:func:`energon_pack.encoding.load_processor`)."""
    from energon_pack.encoding import load_processor as load_images_only

    try:
        return load_images_only(path, trust_remote_code=trust_remote_code)
    except ValueError as exc:
        raise click.UsageError(f"--processor {exc}") from exc


_OPT_IN = "pass --trust-remote-code if you trust the Python files in that directory."


def _refuse_remote_code(path: Path, what: str, trust_remote_code: bool) -> None:
    from energon_pack.encoding import refuse_remote_code

    if not trust_remote_code:
        try:
            refuse_remote_code(path, what=what, opt_in=_OPT_IN)
        except ValueError as exc:
            raise click.UsageError(f"--{what} {exc}") from exc


def tokenizer_argument(path: Path, trust_remote_code: bool) -> Any:
    """The tokenizer argument for an encoder: the path, or the tokenizer loaded with remote code
    when the user opted in (encoders load paths with ``trust_remote_code=False``)."""
    _refuse_remote_code(path, "tokenizer", trust_remote_code)
    if not trust_remote_code:
        return str(path)
    from energon_pack.encoding import load_tokenizer

    return load_tokenizer(path, trust_remote_code=True)
