"""``llmscale plan``: the capacity note of a model on a GPU, from the roofline model.

``-o table`` (default) prints it for people with rich; ``-o json`` and ``-o yaml`` print the
:class:`~llmscale.planner.CapacityPlan` (keys documented in ``docs/cli.md`` and ``docs/plan.md``). Exit
status 0 on success, 2 on a usage error (unknown preset, unreadable config, a value out of range)
or when the model does not fit (the inputs cannot make a replica), 1 when stdout is closed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from llmscale import planner
from llmscale.api import ModelArchitecture, ModelSpec, ResourcesSpec
from llmscale.commands.output import add_output_argument, write_document
from llmscale.commands.specfile import SpecFileError, read_llmdeployment
from llmscale.fielderrors import field_errors, suggestion
from llmscale.model import (
    DEFAULT_BANDWIDTH_EFFICIENCY,
    DEFAULT_COMPUTE_EFFICIENCY,
    GPU_PRESETS,
    MODEL_PRESETS,
    ModelArch,
    ModelDoesNotFit,
    ReplicaModel,
)

__all__ = ["add_arguments", "main", "render_table"]

GiB = float(1 << 30)
DTYPES = ("bf16", "fp16", "fp8")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``plan`` options to ``parser``."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", metavar="PRESET", help=f"model preset: {', '.join(MODEL_PRESETS)}")
    which.add_argument(
        "--config",
        metavar="CONFIG_JSON",
        type=Path,
        help="a Hugging Face config.json instead of a preset (parameters estimated from it)",
    )
    which.add_argument(
        "--spec",
        metavar="FILE",
        type=Path,
        help="an LLMDeployment manifest: its model, accelerator (a preset or spec.resources.accelerator), "
             "GPUs, dtypes, context limit, calibration and ITL SLO instead of the flags",
    )
    parser.add_argument(
        "--gpu", metavar="PRESET", help=f"GPU preset (with --model or --config): {', '.join(GPU_PRESETS)}"
    )
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per replica, tensor parallel (default 1)")
    parser.add_argument(
        "--weight-dtype", choices=DTYPES, default="bf16", help="weight storage (default bf16)"
    )
    parser.add_argument("--kv-dtype", choices=DTYPES, default="bf16", help="KV-cache storage (default bf16)")
    parser.add_argument(
        "--mean-context-tokens",
        type=int,
        default=planner.DEFAULT_MEAN_CONTEXT_TOKENS,
        metavar="C",
        help="mean context of a decoding sequence, tokens (default %(default)s: Azure LLM trace 2023, conversation)",
    )
    parser.add_argument(
        "--context-limit-tokens",
        type=int,
        default=planner.DEFAULT_CONTEXT_LIMIT_TOKENS,
        metavar="L",
        help="longest context a request may have (vLLM --max-model-len), tokens (default %(default)s)",
    )
    parser.add_argument(
        "--min-tokens-per-second-per-user",
        type=float,
        default=planner.DEFAULT_MIN_TOK_S_PER_USER,
        metavar="S",
        help="per-user decode floor, tokens/s (default %(default)s = 1 / the default 0.1 s ITL SLO)",
    )
    parser.add_argument(
        "--bandwidth-efficiency",
        type=float,
        default=DEFAULT_BANDWIDTH_EFFICIENCY,
        metavar="E",
        help="achieved share of peak memory bandwidth (default %(default)s)",
    )
    parser.add_argument(
        "--compute-efficiency",
        type=float,
        default=DEFAULT_COMPUTE_EFFICIENCY,
        metavar="E",
        help="achieved share of dense peak FLOP/s (default %(default)s)",
    )
    parser.add_argument(
        "--gpu-hour-usd",
        type=float,
        default=planner.DEFAULT_GPU_HOUR_USD,
        metavar="X",
        help="price of one GPU-hour, USD (default %(default)s)",
    )
    parser.add_argument(
        "--utilisation",
        type=float,
        default=planner.DEFAULT_UTILISATION,
        metavar="U",
        help="share of the hour spent at the goodput peak, for the cost (default %(default)s)",
    )
    add_output_argument(parser, ("table", "json", "yaml", "spec"), "table")


def _error(message: str) -> int:
    print(f"llmscale plan: error: {message}", file=sys.stderr)
    return 2


def _arch(args: argparse.Namespace) -> ModelArch:
    if args.model is not None:
        if args.model not in MODEL_PRESETS:
            raise LookupError(f"unknown model preset {args.model!r}{suggestion(args.model, MODEL_PRESETS)}; "
                              f"known: {', '.join(MODEL_PRESETS)}")
        return MODEL_PRESETS[args.model]
    path: Path = args.config
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LookupError(f"cannot read {path}: {exc}") from exc
    if not isinstance(config, dict):
        raise LookupError(f"{path} is not a JSON object")
    return ModelArch.from_hf_config(config, name=path.parent.name or path.stem)


def main(args: argparse.Namespace) -> int:
    """Run ``llmscale plan``; returns the exit status (0, or 2 for usage errors and no fit)."""
    if args.spec is not None:
        if args.gpu is not None or args.output == "spec":
            return _error("--spec reads the model and the accelerator from the LLMDeployment: "
                          "--gpu and -o spec go with --model or --config")
        try:
            spec = read_llmdeployment(args.spec).spec
        except SpecFileError as exc:
            for line in exc.lines:
                print(f"llmscale plan: error: {line}", file=sys.stderr)
            return 2
    elif args.gpu is None:
        return _error(f"--gpu is required with --model or --config: {', '.join(GPU_PRESETS)}")
    elif args.gpu not in GPU_PRESETS:
        return _error(f"unknown GPU preset {args.gpu!r}{suggestion(args.gpu, GPU_PRESETS)}; "
                      f"known: {', '.join(GPU_PRESETS)}")
    context_limit, per_user = args.context_limit_tokens, args.min_tokens_per_second_per_user
    gpu_name: str = args.gpu or ""
    try:
        if args.spec is not None:
            model = ReplicaModel.from_spec(spec)
            arch = model.arch
            context_limit, per_user = spec.model.context_limit_tokens, 1.0 / spec.slo.itl_p95_seconds
        else:
            arch = _arch(args)
            model = ReplicaModel(
                arch=arch,
                gpu=GPU_PRESETS[gpu_name],
                gpus=args.gpus,
                weight_dtype=args.weight_dtype,
                kv_dtype=args.kv_dtype,
                bandwidth_efficiency=args.bandwidth_efficiency,
                compute_efficiency=args.compute_efficiency,
            )
        result = planner.plan(
            model,
            mean_context_tokens=args.mean_context_tokens,
            context_limit_tokens=context_limit,
            min_tokens_per_second_per_user=per_user,
            gpu_hour_usd=args.gpu_hour_usd,
            utilisation=args.utilisation,
        )
    except ModelDoesNotFit as exc:
        return _error(str(exc))
    except KeyError as exc:
        # str(KeyError) wraps its message in quotes; the message itself is what the user needs.
        return _error(str(exc.args[0]) if exc.args else str(exc))
    except (LookupError, ValueError) as exc:
        return _error(str(exc))
    if args.output == "spec":
        try:
            fragment = spec_fragment(args, arch)
        except ValidationError as exc:  # a plan the CRD cannot hold (more than 64 GPUs, a tiny limit)
            for line in field_errors(exc):
                print(f"llmscale plan: error: -o spec: {line}", file=sys.stderr)
            return 2
        write_document(fragment, "yaml")
    elif args.output in ("json", "yaml"):
        write_document(result.to_json(), args.output)
    else:
        render_table(result, model, Console())
    return 0


def spec_fragment(args: argparse.Namespace, arch: ModelArch) -> dict[str, Any]:
    """The ``spec.model`` and ``spec.resources`` of an LLMDeployment for the planned model and GPU
    (``plan -o spec``), as the API server spells them: a preset by name, a ``config.json`` as
    ``spec.model.architecture`` (so nobody transcribes one by hand). Validated by the CRD's models
    before it is printed.

    Raises:
        pydantic.ValidationError: the fragment is not a valid spec (a config outside the CRD's bounds).
    """
    if args.model is not None:
        model = ModelSpec(name=args.model, preset=args.model, weight_dtype=args.weight_dtype,
                          kv_cache_dtype=args.kv_dtype, context_limit_tokens=args.context_limit_tokens)
    else:
        architecture = ModelArchitecture(
            num_hidden_layers=arch.num_hidden_layers, num_attention_heads=arch.num_attention_heads,
            num_key_value_heads=arch.num_key_value_heads, head_dim=arch.head_dim, hidden_size=arch.hidden_size,
            parameters=arch.parameters,
            active_parameters=arch.active_parameters if arch.active_parameters != arch.parameters else None)
        model = ModelSpec(name=arch.name, architecture=architecture, weight_dtype=args.weight_dtype,
                          kv_cache_dtype=args.kv_dtype, context_limit_tokens=args.context_limit_tokens)
    device = GPU_PRESETS[args.gpu].resource_name
    resources = ResourcesSpec(gpu_type=args.gpu, gpus_per_replica=args.gpus, gpu_resource_name=device)
    fields = {"gpu_type", "gpus_per_replica"} | ({"gpu_resource_name"} if device != "nvidia.com/gpu" else set())
    return {"spec": {"model": model.model_dump(mode="json", by_alias=True, exclude_none=True),
                     "resources": resources.model_dump(mode="json", by_alias=True, include=fields)}}


def _usd(value: float | None) -> str:
    return "n/a (no batch meets the floor)" if value is None else f"${value:,.3f}"


def render_table(p: planner.CapacityPlan, model: ReplicaModel, console: Console) -> None:
    """Print the capacity note of ``p`` (for ``model``) to ``console`` as two rich tables."""
    a = model.arch
    note = Table(
        title=(
            f"Capacity note: {p.model} on {p.gpus}× {p.gpu} ({p.weight_dtype} weights, {p.kv_dtype} KV cache)"
        ),
        show_header=False,
    )
    note.add_column("figure", style="bold")
    note.add_column("value")
    note.add_row(
        "Fits",
        f"yes: weights {p.weight_bytes / GiB:.1f} GiB of {p.usable_memory_bytes / GiB:.1f} GiB usable "
        f"({model.gpu_memory_utilization:.0%} of {p.gpus} × {model.gpu.memory_bytes / GiB:.0f} GiB); "
        f"KV cache {p.kv_cache_bytes / GiB:.1f} GiB = {p.kv_cache_capacity_tokens:,} tokens",
    )
    note.add_row(
        "KV per token",
        f"{p.kv_bytes_per_token / 1024:,.0f} KiB = 2 (K,V) × {a.num_hidden_layers} layers × "
        f"{a.num_key_value_heads} KV heads × {a.head_dim} × {p.kv_bytes_per_token // (2 * a.num_hidden_layers * a.num_key_value_heads * a.head_dim)} B",
    )
    note.add_row(
        "KV per user at the limit",
        f"{p.kv_bytes_per_sequence_at_limit / GiB:.2f} GiB at {p.context_limit_tokens:,} tokens",
    )
    note.add_row(
        "Concurrency",
        f"{p.max_concurrent_sequences:,} sequences at the {p.context_limit_tokens:,}-token limit; "
        f"{p.sequences_at_mean_context:,} at the mean context of {p.mean_context_tokens:,}",
    )
    note.add_row("Batch 1", f"ITL {p.batch_one_itl_s * 1e3:.2f} ms = {p.batch_one_tok_s:,.0f} tok/s per user")
    note.add_row(
        "Memory knee",
        f"batch {p.memory_knee_batch:,.1f}: there B × {p.mean_context_tokens:,} tokens × "
        f"{p.kv_bytes_per_token / 1024:,.0f} KiB of KV reads equal the {p.weight_bytes / GiB:.1f} GiB weight read; "
        "past it KV reads are most of each step: ITL grows about linearly with the batch and throughput flattens",
    )
    note.add_row(
        "Compute ridge",
        f"batch {p.compute_ridge_batch:,.1f}: weight-read time equals 2 × {a.active_parameters / 1e9:.2f} B "
        f"active params × B at {model.effective_flops / 1e12:,.0f} TFLOP/s effective "
        f"({model.effective_bandwidth_bytes_s / 1e12:.2f} TB/s effective bandwidth)",
    )
    asym_kind = (
        "KV-bound"
        if p.throughput_asymptote_tok_s < model.effective_flops / model.flops_per_token
        else "compute-bound"
    )
    note.add_row(
        "Throughput asymptote", f"{p.throughput_asymptote_tok_s:,.0f} tok/s ({asym_kind}, batch → ∞)"
    )
    if p.goodput_peak_batch > 0 and p.goodput_peak_itl_s is not None:
        peak = (
            f"batch {p.goodput_peak_batch:,}: {p.goodput_peak_tok_s:,.0f} tok/s, ITL {p.goodput_peak_itl_s * 1e3:.1f} ms "
            f"(≥ {p.min_tokens_per_second_per_user:g} tok/s per user); limited by the {p.goodput_peak_limited_by}"
            f" (latency floor allows {p.latency_floor_batch:,}, KV cache holds {p.sequences_at_mean_context:,})"
        )
    else:
        peak = f"none: even batch 1 decodes slower than {p.min_tokens_per_second_per_user:g} tok/s per user"
    note.add_row("Goodput peak", peak)
    note.add_row("Recommended --max-num-seqs", f"{p.recommended_max_num_seqs:,}")
    note.add_row(
        "Recommended --max-num-batched-tokens",
        f"{p.recommended_max_num_batched_tokens:,} (a full chunked-prefill step within the "
        f"{1000 / p.min_tokens_per_second_per_user:.0f} ms ITL target)"
        if p.recommended_max_num_batched_tokens is not None
        else "none keeps a step within the ITL target",
    )
    note.add_row(
        "Cost per million tokens",
        f"{_usd(p.usd_per_million_tokens)} at ${p.gpu_hour_usd:g}/GPU-hour × {p.gpus}, {p.utilisation:.0%} utilisation",
    )
    for w in p.what_if:
        note.add_row(
            f"What if {w.change}",
            f"{w.max_concurrent_sequences:,} sequences at the limit, knee at batch {w.memory_knee_batch:,.1f}, "
            f"goodput peak batch {w.goodput_peak_batch:,} = {w.goodput_peak_tok_s:,.0f} tok/s, "
            f"{_usd(w.usd_per_million_tokens)} per million tokens",
        )
    console.print(note)

    curve = Table(title=f"Decode curve at a mean context of {p.mean_context_tokens:,} tokens")
    for name in (
        "batch",
        "step / ITL (ms)",
        "per-user tok/s",
        "throughput tok/s",
        "KV share of reads",
        "bound",
    ):
        curve.add_column(name, justify="right")
    for c in p.curve:
        curve.add_row(
            f"{c.batch:,}",
            f"{c.step_time_s * 1e3:.2f}",
            f"{c.per_user_tok_s:,.1f}",
            f"{c.throughput_tok_s:,.0f}",
            f"{c.kv_read_fraction:.0%}",
            c.bound,
        )
    console.print(curve)
