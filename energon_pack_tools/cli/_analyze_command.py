# SPDX-License-Identifier: Apache-2.0
"""``energon-pack analyze``: what packing will do to *your* dataset, through the real loader.

``--task`` picks the encoder (:mod:`energon_pack_tools.cli._tasks`) or ``--encoder
module:Class`` runs your own; prints fill, packs, over-long counts and the smallest buffer
reaching 99% fill; ``--json`` prints the :class:`~energon_pack_tools.AnalysisResult`,
``--plot FILE.png`` draws it. See docs/howto/buffer-size.md. On a ``blend:`` metadataset it
prints the shares of tokens, documents and loss tokens each dataset trains on, sample-weighted
and size-weighted, under the packing groups its datasets name (policies: the encoder's
``packing_groups`` and ``--packing-group NAME=BUFFER[,ALGORITHM]``; docs/howto/blends.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import click

from energon_pack.algorithms import PackingSpec
from energon_pack_tools.cli._options import buffer_size_option, spec_options
from energon_pack_tools.cli._output import check_writable, os_error, progress_bars
from energon_pack_tools.cli._tasks import (
    TASKS,
    build_encoder,
    check_sample_type,
    encoder_args,
    load_encoder,
    reading_tasks,
)


@click.command(name="analyze")
@click.argument("dataset", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--task",
    type=click.Choice(list(TASKS)),
    default="text",
    show_default=True,
    help="The encoder the dataset goes through: text (TextSample / JSONL text), sft (JSONL "
    "prompt/response), captioning (CaptioningSample), vqa (VQASample, VidQASample), "
    "conversation (make-dataset --task conversation; VQA, VidQA, InterleavedSample).",
)
@click.option(
    "--encoder",
    "encoder_ref",
    metavar="MODULE:CLASS",
    default=None,
    help="Your own PackingTaskEncoder subclass instead of --task (module importable from the "
    "current folder or PYTHONPATH); it gets tokenizer= from --tokenizer, image_processor= from "
    "--processor, config= the packing options, and --encoder-arg(s).",
)
@click.option(
    "--encoder-args",
    "encoder_args_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="--encoder: its constructor's keyword arguments, a JSON or YAML mapping.",
)
@click.option(
    "--encoder-arg",
    "encoder_arg_pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="--encoder: one keyword argument (value read as YAML: 512, true, [1, 2]); repeatable, "
    "overrides --encoder-args.",
)
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Local transformers tokenizer directory (media tasks: default the --processor one).",
)
@click.option(
    "--processor",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="captioning/vqa/conversation: local transformers processor directory "
    "(preprocessor_config.json); media tokens are reported apart from text tokens.",
)
@click.option(
    "--trust-remote-code",
    is_flag=True,
    help="Let transformers run the Python files of a --tokenizer/--processor directory whose "
    "configs have an auto_map (refused without this flag; never asked interactively).",
)
@spec_options
@buffer_size_option
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Read only N samples.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--no-progress",
    is_flag=True,
    help="Hide the progress bars (energon's too); they are hidden anyway when stderr is not a "
    "terminal.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write a PNG: length histogram, fill against buffer size, the first packs.",
)
@click.option(
    "--blend-tokens",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="DATASET a `blend:` metadataset: tokens each run (sample- and size-weighted) reads.",
)
@click.option(
    "--blend-size",
    type=click.Choice(["tokens", "bytes"]),
    default="tokens",
    show_default=True,
    help="DATASET a `blend:` metadataset: the size the size-weighted run weighs "
    "(encoder.blend_size).",
)
@click.option(
    "--packing-group",
    "packing_group_specs",
    multiple=True,
    metavar="NAME=BUFFER[,ALGORITHM]",
    help="DATASET a `blend:` metadataset whose datasets name a packing_group subflavor: that "
    "group's packing buffer (and algorithm), as encoder.packing_groups[NAME] = "
    "PackingPolicy(buffer_size=BUFFER, algorithm=ALGORITHM); repeatable, added to the "
    "--encoder's own packing_groups.",
)
@click.option(
    "--lengths-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write each document's length (and media tokens, media items) as a lengths file "
    "for `energon-pack simulate`.",
)
def command(
    dataset: Path,
    task: str,
    encoder_ref: str | None,
    encoder_args_file: Path | None,
    encoder_arg_pairs: tuple[str, ...],
    tokenizer: Path | None,
    processor: Path | None,
    trust_remote_code: bool,
    spec: PackingSpec,
    buffer_size: int,
    limit: int | None,
    as_json: bool,
    no_progress: bool,
    plot: Path | None,
    blend_tokens: int,
    blend_size: str,
    packing_group_specs: tuple[str, ...],
    lengths_out: Path | None,
) -> None:
    """Pack one epoch of DATASET with the --task encoder and report fill and a buffer size."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    progress = progress_bars(no_progress or as_json)
    for path, option in ((lengths_out, "--lengths-out"), (plot, "--plot")):
        if path is not None:  # before the run, not after it
            check_writable(path, option)
    from energon_pack_tools._analysis import FirstSamplesFailed, analyze_dataset
    from energon_pack_tools._blend_analysis import (
        analyze_blend,
        blend_leaves,
        parse_packing_group,
    )
    from energon_pack_tools._datasets import check_dataset
    from energon_pack_tools._plots import TooFewDocuments, plot_analysis

    try:  # a metadataset's leaves as the loader resolves them (nested ones flattened)
        blend = blend_leaves(dataset)
    except (ValueError, OSError) as exc:  # a metadataset energon cannot load
        raise click.ClickException(f"{dataset}: {exc}") from exc
    if blend is not None and (plot or lengths_out or limit):
        raise click.UsageError(
            f"{dataset} is a `blend:` metadataset: analyze prints the shares each dataset trains "
            "on; --plot, --lengths-out and --limit apply to one dataset (analyze a leaf)."
        )
    if packing_group_specs and blend is None:
        raise click.UsageError(
            "--packing-group applies to a `blend:` metadataset whose datasets name a "
            f"packing_group subflavor; {dataset} is not a `blend:` metadataset."
        )
    try:
        policies = dict(parse_packing_group(text) for text in packing_group_specs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--packing-group") from None
    if policies and blend_size != "tokens":
        raise click.UsageError(
            f"packing groups blend their packs in tokens (or documents): a pack cannot be "
            f"measured in {blend_size}; use --blend-size tokens with --packing-group."
        )

    def make_encoder() -> tuple[object, list[str]]:
        if encoder_ref is None:
            if encoder_args_file is not None or encoder_arg_pairs:
                raise click.UsageError("--encoder-arg(s) are for --encoder MODULE:CLASS.")
            built = build_encoder(
                task,
                spec,
                tokenizer=tokenizer,
                processor=processor,
                trust_remote_code=trust_remote_code,
            )
            check_sample_type(dataset, task)
            return built
        ctx = click.get_current_context()
        if ctx.get_parameter_source("task") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("give --task or --encoder, not both.")
        args = encoder_args(encoder_args_file, encoder_arg_pairs)
        return load_encoder(
            encoder_ref,
            args,
            spec,
            tokenizer=tokenizer,
            processor=processor,
            trust_remote_code=trust_remote_code,
        )

    try:
        check_dataset(dataset)
        encoder, notes = make_encoder()
        for note in notes:
            click.echo(note, err=True)
        named = [leaf.group for leaf in blend or []]
        if any(g is not None for g in named):
            _check_groups(named, {**(getattr(encoder, "packing_groups", None) or {}), **policies})
        # energon prints shard slices to stdout; keep stdout for the report (and --json).
        with contextlib.redirect_stdout(sys.stderr):
            if blend is not None:
                shares = analyze_blend(
                    dataset,
                    lambda: make_encoder()[0],
                    buffer_size=buffer_size,
                    tokens=blend_tokens,
                    size=blend_size,
                    packing_groups=policies,
                    progress=progress,
                )
            else:
                result = analyze_dataset(
                    dataset,
                    encoder=encoder,
                    buffer_size=buffer_size,
                    limit=limit,
                    progress=progress,
                )
    except FirstSamplesFailed as exc:
        what = f"--encoder {encoder_ref}" if encoder_ref else f"--task {task}"
        # a reason cut at its length limit keeps its "..." (only a sentence's period goes)
        reason = exc.reason if exc.reason.endswith("...") else exc.reason.rstrip(".")
        raise click.ClickException(
            f"{dataset}: the first {exc.count} samples all failed with {what}, e.g. "
            f"{exc.key}: {reason}; {reading_tasks(exc.sample, task)}"
        ) from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:  # e.g. a shard deleted or unreadable while reading
        raise os_error(exc, "read", dataset) from exc
    if blend is not None:
        click.echo(json.dumps(shares.to_dict()) if as_json else "\n".join(shares.lines()))
        return
    if result.packs == 0:
        first = result.skipped_samples[:1]
        why = f", e.g. {first[0][0]}: {first[0][1]}" if first else ""
        raise click.ClickException(
            f"{dataset}: no packs came out (every sample empty, dropped or skipped{why}); check "
            "the dataset with `energon info`, the --task and the --overlong policy."
        )
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        for line in result.lines():
            click.echo(line)
    if lengths_out is not None:
        try:
            lengths_out.write_text(result.lengths_file())
        except OSError as exc:
            raise os_error(exc, "write", lengths_out) from exc
        click.echo(f"{'lengths':<19} {lengths_out}", err=as_json)
    if plot is not None:  # after the report: a failed picture must not cost the figures
        try:
            plot_analysis(result, plot)
        except TooFewDocuments as exc:  # not a failure: nothing worth drawing
            click.echo(f"{'plot':<19} none: {exc}", err=as_json)
        except Exception as exc:  # any failure here is only a warning
            click.echo(f"warning: no plot written to {plot}: {exc}", err=True)
        else:
            click.echo(f"{'plot':<19} {plot}", err=as_json)


def _check_groups(named: list[str | None], policies: dict[str, object]) -> None:
    """The metadataset's packing groups against the policies: a group without one is refused
    naming ``--packing-group``; none at all packs in one buffer, with a note."""
    groups = sorted({g for g in named if g is not None})
    if not policies:
        click.echo(
            f"note: the datasets name packing groups {', '.join(groups)}; without a policy "
            "(--packing-group NAME=BUFFER[,ALGORITHM], or an --encoder with packing_groups) "
            "they are packed in one buffer of --buffer-size, as a loader would.",
            err=True,
        )
        return
    missing = [g for g in groups if g not in policies]
    if missing:
        raise click.UsageError(
            f"the metadataset names packing group(s) {', '.join(missing)} without a policy: "
            + " ".join(f"--packing-group {g}=BUFFER" for g in missing)
            + f" (policies given: {', '.join(sorted(policies))})."
        )
