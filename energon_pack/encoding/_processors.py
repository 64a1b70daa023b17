# SPDX-License-Identifier: Apache-2.0
"""Loading a VLM processor from a local directory without torchvision.

transformers builds a whole processor with ``AutoProcessor``, and for every family that has a
video processor (LLaVA-OneVision, SmolVLM, InternVL, the Qwen-VL family) that part needs
torchvision ("Can't load video processor"). Packing images needs only the image processor and
the tokenizer, so :func:`load_processor` builds the family's own processor class without the
video processor (:func:`images_only_class`). The class keeps its transformers name, so what
``save_pretrained`` writes names a class transformers (and ``energon-pack analyze``) knows.

Trace on a LLaVA-OneVision directory (``processor_config.json``: ``processor_class
"LlavaOnevisionProcessor"``, a nested image processor, ``num_image_tokens: 4``)::

    load_processor(DIR)
      -> images_only_class(LlavaOnevisionProcessor)   attributes: image_processor, tokenizer
      -> .from_pretrained(DIR, local_files_only=True)
      == LlavaOnevisionProcessor(image_processor, tokenizer, num_image_tokens=4, ...)
         with video_processor None

A directory whose ``processor_class`` is not a transformers class (a subclass saved under its
own name) is read as the one processor class its image processor serves, or refused with the
candidates: pass ``processor_class=``.
"""

from __future__ import annotations

import json
import warnings
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["images_only_class", "load_processor", "processor_classes_of"]

_CONFIGS = ("processor_config.json", "preprocessor_config.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_OPT_IN = "pass trust_remote_code=True if you trust the Python files in that directory."


@cache
def images_only_class(cls: type) -> type:
    """``cls`` (a transformers ``ProcessorMixin`` subclass) without its video processor: a
    subclass of the same name whose ``get_attributes()`` leaves out ``video_processor``, so
    building it (``from_pretrained`` or the constructor) never needs torchvision.

    Example:
        ``images_only_class(LlavaOnevisionProcessor)(image_processor, tokenizer, num_image_tokens=4)``
    """
    attributes = [a for a in cls.get_attributes() if a != "video_processor"]
    get_attributes = classmethod(lambda _cls: list(attributes))
    return type(cls.__name__, (cls,), {"get_attributes": get_attributes, "__module__": __name__})


def load_processor(
    path: Path | str,
    *,
    images_only: bool = True,
    processor_class: str | type | None = None,
    trust_remote_code: bool = False,
) -> Any:
    """The processor saved in the local directory ``path``, offline, built without torchvision.

    With a tokenizer and a ``processor_class`` in the directory (what ``processor.save_pretrained``
    writes): that family's processor without its video processor (see :func:`images_only_class`),
    e.g. ``LlavaOnevisionProcessor``, ``SmolVLMProcessor``, ``InternVLProcessor``,
    ``Qwen2VLProcessor``; else (``image_processor.save_pretrained``) the image processor alone.
    Either is what the media task encoders take as ``image_processor``.

    Args:
        path: A local directory with ``processor_config.json`` or ``preprocessor_config.json``.
        images_only: ``False``: ``AutoProcessor.from_pretrained`` as is, video processor
            included (needs torchvision for the families that have one).
        processor_class: The transformers processor class (or its name) to build, where the
            directory's ``processor_class`` is not one (a subclass saved under its own name).
        trust_remote_code: Run the directory's Python files when its configs ask for remote
            code (an ``auto_map``); refused otherwise. transformers never prompts.

    Raises:
        ValueError: no processor config, remote code not opted in, or a ``processor_class``
            that names no transformers class and cannot be told from the image processor.
    """
    from transformers import AutoImageProcessor, AutoProcessor

    from energon_pack.encoding._remote_code import refuse_remote_code

    path = Path(path)
    if not any((path / name).is_file() for name in _CONFIGS):
        raise ValueError(
            f"{path}: no processor_config.json or preprocessor_config.json; give a local "
            "transformers processor directory (what processor.save_pretrained(DIR) or "
            "image_processor.save_pretrained(DIR) writes)."
        )
    if not trust_remote_code:
        refuse_remote_code(path, what="processor", opt_in=_OPT_IN)
    options = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "use_fast" and backend notices
        if not images_only:
            return AutoProcessor.from_pretrained(str(path), **options)
        image_processor = AutoImageProcessor.from_pretrained(str(path), **options)
        name = processor_class or _saved_class_name(path)
        if name is None or not any((path / f).is_file() for f in _TOKENIZER_FILES):
            return image_processor
        cls = _processor_class(path, name, type(image_processor).__name__)
        if "video_processor" in _init_parameters(cls):  # SmolVLM's is a required argument
            options["video_processor"] = None
        return images_only_class(cls).from_pretrained(str(path), **options)


def _saved_class_name(path: Path) -> str | None:
    for name in _CONFIGS:
        file = path / name
        if file.is_file():
            found = json.loads(file.read_text(encoding="utf-8")).get("processor_class")
            if found:
                return str(found)
    return None


def _processor_class(path: Path, name: str | type, image_processor: str) -> type:
    """The transformers class ``name`` is, or the one class ``image_processor`` serves."""
    import transformers

    if isinstance(name, type):
        return name
    found = getattr(transformers, name, None)
    if isinstance(found, type) and hasattr(found, "get_attributes"):
        return found
    candidates = processor_classes_of(image_processor)
    if len(candidates) > 1:  # keep the classes that take every option the directory saved
        options = set(_saved_options(path))
        fitting = [c for c in candidates if options <= _init_parameters(getattr(transformers, c))]
        candidates = fitting or candidates
    if len(candidates) == 1:
        return getattr(transformers, candidates[0])
    serves = (
        f"its image processor {image_processor} serves {', '.join(candidates)}"
        if candidates
        else f"its image processor {image_processor} serves no transformers processor class"
    )
    raise ValueError(
        f"{path}: processor_class {name!r} is not a transformers processor class (a subclass "
        f"saved under its own name?) and {serves}; pass processor_class='...' (e.g. "
        f"load_processor(DIR, processor_class='{(candidates or ['LlavaNextProcessor'])[0]}')) "
        "or write the transformers class into processor_config.json."
    )


def _saved_options(path: Path) -> list[str]:
    """The processor's own options in ``processor_config.json`` (not its parts)."""
    file = path / "processor_config.json"
    config = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    return [k for k, v in config.items() if k != "processor_class" and not isinstance(v, dict)]


def _init_parameters(cls: type) -> set[str]:
    import inspect

    return set(inspect.signature(cls.__init__).parameters)


def processor_classes_of(image_processor: str) -> list[str]:
    """The transformers processor classes whose model types use the image processor class
    ``image_processor`` (``"LlavaOnevisionImageProcessorPil"`` -> ``["LlavaOnevisionProcessor"]``)."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    names = set()
    for model_type, classes in IMAGE_PROCESSOR_MAPPING_NAMES.items():
        values = classes.values() if isinstance(classes, dict) else classes
        values = [values] if isinstance(values, str) else list(values)
        if image_processor in values and model_type in PROCESSOR_MAPPING_NAMES:
            names.add(PROCESSOR_MAPPING_NAMES[model_type])
    return sorted(names)
