"""``llmscale calibrate --url URL``: measure a live engine and fit the performance model to it.

Measures (one variable at a time, warm-up discarded; :mod:`llmscale.calibrate.sweep`) lone
prompts of growing length, closed-loop decode batches of growing size (the knee), and fixed
request rates with a trace's lengths; fits the roofline's bandwidth and compute efficiency and a
per-step and a per-sequence overhead (:mod:`llmscale.model.fit`); prints the measured capacity note beside the
roofline's before and after calibration with the error of each figure; ``--spec-out FILE`` writes
the ``spec.model.calibration`` (and ``spec.resources.accelerator``) fragment the operator uses.

Progress goes to stderr, the note to stdout (``-o table|json|yaml``). Exit status 0 on success,
2 on a usage error, 1 when the engine cannot be reached or answers nothing usable.

The load is driven with aiohttp (already a dependency) rather than a benchmarking library: the
ones on PyPI (guidellm: 97 packages with torch and CUDA wheels; aiperf: 139 with Dash, Plotly and
Kopf) are far heavier than the operator, and none exposes per-token gaps with the running batch
read beside them, which the fit needs.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Any

from llmscale.commands.output import add_output_argument, write_document

__all__ = ["add_arguments", "default_prompt_lengths", "fit_warnings", "main"]


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"values must be at least 1, got {text!r}")
    return values


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _base_url(text: str) -> str:
    """An engine's base URL: ``http(s)://host[:port][/prefix]``, no query, fragment, whitespace or
    ``/v1`` (the client adds ``/v1/…`` itself), a port in 1–65535, a host name IDNA can encode."""
    import re
    from urllib.parse import urlsplit

    if any(c.isspace() or not c.isprintable() for c in text) or "?" in text or "#" in text:
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT (the engine's base URL), got {text!r}")
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a port that is not a number in 0-65535
        if parts.hostname:
            parts.hostname.encode("idna")
    except (ValueError, UnicodeError) as exc:
        raise argparse.ArgumentTypeError(f"not a URL: {text!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT (the engine's base URL), got {text!r}")
    if re.search(r"(^|/)v1(/|$)", parts.path):
        raise argparse.ArgumentTypeError(f"give the engine's base URL without /v1 (its API paths are added), got {text!r}")
    return text


def _seconds(text: str, *, zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
        raise argparse.ArgumentTypeError(f"must be {'0 or more' if zero else 'positive'}, got {text!r}")
    return value


def _positive(text: str) -> float:
    return _seconds(text, zero=False)


def _non_negative(text: str) -> float:
    return _seconds(text, zero=True)


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if any(not (math.isfinite(v) and v > 0) for v in values):
        raise argparse.ArgumentTypeError(f"values must be positive, got {text!r}")
    return values


def _accelerator(text: str) -> dict[str, Any]:
    keys = {"name": str, "memory": float, "bandwidth": float, "flops": float}
    out: dict[str, Any] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in keys:
            raise argparse.ArgumentTypeError(
                f"expected name=N,memory=BYTES,bandwidth=BYTES_PER_S,flops=FLOP_PER_S, got {text!r}"
            )
        try:
            out[key.strip()] = keys[key.strip()](value.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{key.strip()}: not a number: {value!r}") from None
    missing = set(keys) - set(out)
    if missing:
        raise argparse.ArgumentTypeError(f"--accelerator lacks {', '.join(sorted(missing))}")
    if not out["name"].strip():
        raise argparse.ArgumentTypeError("--accelerator name must not be empty")
    for key in ("memory", "bandwidth", "flops"):
        if not (math.isfinite(out[key]) and out[key] > 0):
            raise argparse.ArgumentTypeError(f"--accelerator {key} must be a positive finite number, got {out[key]!r}")
    return out


def default_prompt_lengths(limit: int) -> list[int]:
    """The lone prompts measured by default for a context limit of ``limit`` tokens: 16, 64, 256,
    1,024, then 2,048 doubling below the limit, three quarters of it and the limit less 16
    (room for the output), ascending and each below ``limit − 2``. E.g. 4,096: 16, 64, 256,
    1,024, 2,048, 3,072, 4,080."""
    lengths = {16, 64, 256, 1024, limit * 3 // 4, limit - 16}
    n = 2048
    while n < limit - 16:
        lengths.add(n)
        n *= 2
    return sorted(x for x in lengths if 1 <= x < limit - 2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``calibrate`` options to ``parser``."""
    from llmscale.data import BUNDLED_TRACES, DEFAULT_TRACE
    from llmscale.model import GPU_PRESETS, MODEL_PRESETS

    parser.add_argument("--url", required=True, type=_base_url, help="the engine's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--served-model-name", default=None, help="model to ask for (default: the first /v1/models lists)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", metavar="PRESET", help=f"model preset: {', '.join(MODEL_PRESETS)}")
    which.add_argument("--config", metavar="CONFIG_JSON", type=Path, help="the model's Hugging Face config.json")
    hw = parser.add_mutually_exclusive_group(required=True)
    hw.add_argument("--gpu", metavar="PRESET", help=f"accelerator preset: {', '.join(GPU_PRESETS)}")
    hw.add_argument(
        "--accelerator",
        type=_accelerator,
        metavar="name=N,memory=B,bandwidth=B/S,flops=F/S",
        help="hardware that is not a preset (a CPU: its memory, memory bandwidth and dense FLOP/s)",
    )
    parser.add_argument("--gpus", type=int, default=1, help="devices per replica, tensor parallel (default 1)")
    parser.add_argument("--weight-dtype", choices=("bf16", "fp16", "fp8"), default="bf16", help="(default bf16)")
    parser.add_argument("--kv-dtype", choices=("bf16", "fp16", "fp8"), default="bf16", help="(default bf16)")
    parser.add_argument("--max-num-batched-tokens", type=_count, default=None, metavar="T",
                        help="the engine's step token budget (default: vLLM's for the accelerator)")
    parser.add_argument("--max-num-seqs", type=_count, default=None, metavar="S",
                        help="the engine's most running requests (default: vLLM's for the accelerator)")
    parser.add_argument("--prompt-lengths", type=_ints, default=None, metavar="N,N,…",
                        help="lone prompts measured, tokens (default 16,64,256,1,024, then doubling from 2,048 "
                        "up to the context limit, with three quarters of it and the limit itself: a long "
                        "prompt's attention grows with its square, and only long prompts show it)")
    parser.add_argument("--repeats", type=_count, default=5, help="requests per prompt length (default 5)")
    parser.add_argument("--concurrency", type=_ints, default=[1, 2, 4, 8, 16, 32], metavar="N,N,…",
                        help="closed-loop clients of the batch sweep (the knee) (default 1,2,4,8,16,32)")
    parser.add_argument("--decode-prompt-tokens", type=_count, default=64, help="prompt of the decode sweep (default 64)")
    parser.add_argument("--decode-output-tokens", type=_count, default=128, help="output of the decode sweep (default 128)")
    parser.add_argument("--context-prompt-tokens", type=_ints, default=[512, 2048], metavar="N,N,…",
                        help="prompts of the context sweep: decode at a fixed batch, longer contexts (default 512,2048)")
    parser.add_argument("--context-concurrency", type=_count, default=8,
                        help="closed-loop clients of the context sweep (default 8)")
    parser.add_argument("--point-seconds", type=_positive, default=10.0, help="measured seconds per decode point (default 10)")
    parser.add_argument("--warmup-seconds", type=_non_negative, default=3.0, help="discarded seconds before each point (default 3)")
    parser.add_argument("--trace", default=DEFAULT_TRACE,
                        help=f"lengths of the rate points: a bundled trace ({', '.join(BUNDLED_TRACES)}) or a file")
    rates = parser.add_mutually_exclusive_group()
    rates.add_argument("--rates", type=_floats, default=None, metavar="R,R,…", help="fixed request rates, req/s")
    rates.add_argument("--rate-fractions", type=_floats, default=[0.3, 0.6, 0.85], metavar="F,F,…",
                       help="fixed rates as fractions of the fitted saturation rate (default 0.3,0.6,0.85)")
    rates.add_argument("--no-rates", action="store_true", help="skip the fixed-rate points")
    parser.add_argument("--rate-seconds", type=_positive, default=30.0,
                        help="measured seconds per rate point, at least (default 30)")
    parser.add_argument("--rate-requests", type=_count, default=200,
                        help="requests each rate point should count: it runs max(--rate-seconds, N / rate) "
                        "seconds (default 200; a p95 of a few dozen requests is one long prompt more or less)")
    parser.add_argument("--rate-max-seconds", type=_positive, default=600.0,
                        help="the longest a rate point runs, whatever --rate-requests asks (default 600)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the rate points' lengths and arrivals (default 0); the prompts' tokens are fresh "
                        "each run, so that an engine's prefix cache cannot answer them")
    parser.add_argument("--spec-out", type=Path, default=None, metavar="FILE",
                        help="write the spec fragment (spec.model.calibration, spec.resources.accelerator) as YAML")
    add_output_argument(parser, ("table", "json", "yaml"), "table")


#: Seconds an engine may send nothing on a request before it counts as failed (a long prompt's
#: prefill on a large model takes seconds, not minutes).
READ_TIMEOUT_S = 300.0

#: The rms relative error above which the fit is reported as explaining the measurement poorly.
POOR_FIT = 0.25


class MeasurementFailed(RuntimeError):
    """A sweep point measured nothing usable: no calibration is written from it."""


def _error(message: str, status: int) -> int:
    print(f"llmscale calibrate: error: {message}", file=sys.stderr)
    return status


def _progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def fit_warnings(fit: Any) -> list[str]:
    """What a user should check about an :class:`~llmscale.model.fit.EfficiencyFit`: an identified
    efficiency at its bound 1.0 (the engine at or above the accelerator's stated peak, so the
    figures the fit was given understate the hardware). Empty when there is nothing to say."""
    at_one = [what for what, eff, known in (("bandwidth", fit.bandwidth_efficiency, fit.bandwidth_identified),
                                            ("compute", fit.compute_efficiency, fit.compute_identified))
              if known and eff >= 0.999]
    if not at_one:
        return []
    return [f"the fitted {' and '.join(at_one)} efficiency is at its bound 1.0: the engine is as fast as, or faster "
            "than, the accelerator's peak says; check --accelerator (or --gpu) against the hardware"]


def main(args: argparse.Namespace) -> int:
    """Run ``llmscale calibrate``; returns the exit status."""
    from llmscale.calibrate.client import EngineUnreachable
    from llmscale.model import GPU_PRESETS, MODEL_PRESETS, ModelArch, ModelDoesNotFit, ReplicaModel
    from llmscale.model.presets import GPU
    from llmscale.model.vllm_defaults import vllm_batch_defaults

    try:
        if args.model is not None:
            if args.model not in MODEL_PRESETS:
                return _error(f"unknown model preset {args.model!r}; known: {', '.join(MODEL_PRESETS)}", 2)
            arch = MODEL_PRESETS[args.model]
        else:
            arch = ModelArch.from_hf_config(json.loads(args.config.read_text(encoding="utf-8")), name=args.config.parent.name)
        if args.gpu is not None:
            if args.gpu not in GPU_PRESETS:
                return _error(f"unknown GPU preset {args.gpu!r}; known: {', '.join(GPU_PRESETS)}", 2)
            gpu = GPU_PRESETS[args.gpu]
        else:
            a = args.accelerator
            gpu = GPU(a["name"], int(a["memory"]), a["bandwidth"], a["flops"], a["flops"], "--accelerator")
        prior = ReplicaModel(arch=arch, gpu=gpu, gpus=args.gpus, weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype)
    except (OSError, json.JSONDecodeError, ValueError, TypeError, AttributeError, ModelDoesNotFit) as exc:
        return _error(str(exc) or type(exc).__name__, 2)
    # What would fail only after the whole measurement fails now: where the spec goes, the trace.
    if args.spec_out is not None and (args.spec_out.is_dir() or not args.spec_out.parent.is_dir()):
        return _error(f"--spec-out {args.spec_out}: not a file in an existing folder", 2)
    trace = None
    if not args.no_rates:
        from llmscale.data import resolve_trace
        from llmscale.sim.trace import load_trace

        try:
            trace = load_trace(resolve_trace(args.trace))
        except (OSError, ValueError, KeyError) as exc:
            return _error(f"--trace {args.trace}: {exc or type(exc).__name__}", 2)
        if not len(trace.prompt_tokens):
            return _error(f"--trace {args.trace}: no requests", 2)
    seqs, tokens = vllm_batch_defaults(gpu)
    budget = args.max_num_batched_tokens or tokens
    max_seqs = args.max_num_seqs or seqs
    try:
        result = asyncio.run(_run(args, prior, budget, max_seqs, trace))
    except EngineUnreachable as exc:
        return _error(str(exc), 1)
    except MeasurementFailed as exc:
        return _error(f"no calibration written: {exc}", 1)
    except ValueError as exc:
        return _error(f"nothing to fit: {exc}", 1)
    for line in fit_warnings(result[2]):
        _progress(f"warning: {line}")
    if result[2].rms_relative_error > POOR_FIT:
        _progress(f"warning: the fit explains the measurements poorly (rms error {result[2].rms_relative_error:.0%}): "
                  "check --max-num-batched-tokens, --max-num-seqs and the model against the engine's")
    doc = _document(args, *result)
    if args.spec_out is not None:
        import yaml

        try:
            args.spec_out.write_text(
                "# spec fragment written by llmscale calibrate: merge it into the LLMDeployment's spec\n"
                + yaml.safe_dump(doc["spec"], sort_keys=False),
                encoding="utf-8",
            )
        except OSError as exc:
            return _error(f"cannot write {args.spec_out}: {exc}", 1)
    if args.output == "table":
        _render(doc)
    else:
        write_document(doc, args.output)
    return 0


def _check_points(prefill: list[Any], decode: list[Any], rates: list[Any]) -> None:
    """Raise :class:`MeasurementFailed` naming every point that measured nothing (the engine
    stopped answering, or refused the requests) or whose rate requests mostly failed."""
    empty = [f"lone {p.prompt_tokens:,}-token prompts" for p in prefill if not p.ttft.samples]
    empty += [f"decode at {d.concurrency} clients, context {d.context_tokens:,.0f}" for d in decode if not d.itl.samples]
    empty += [f"{r.rate_rps:.3g} req/s ({r.errors} of {r.requests} requests failed)" for r in rates
              if r.requests and r.errors > r.requests / 2]
    empty += [f"{r.rate_rps:.3g} req/s (no request counted: raise --rate-requests or --rate-seconds)" for r in rates
              if not r.requests]
    if empty:
        raise MeasurementFailed(f"these points measured nothing usable: {'; '.join(empty)}")


async def _run(args: argparse.Namespace, prior: Any, budget: int, max_seqs: int, trace: Any) -> tuple[Any, ...]:
    import aiohttp
    import numpy as np

    from llmscale.calibrate.client import EngineClient
    from llmscale.calibrate.note import Measurement, fit_measurement, note_figures
    from llmscale.calibrate.sweep import measure_decode, measure_prefill, measure_rate
    from llmscale.model.batch import batch_throughput

    rng = np.random.default_rng(args.seed)
    # An engine that sends nothing for READ_TIMEOUT_S is stuck: the request fails, the run goes on.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=READ_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        client = EngineClient(args.url, session, args.served_model_name)
        info = await client.probe()
        limit = info.max_model_len or 4096
        print(f"Calibrating {info.model} at {args.url} (context {limit:,} tokens)", file=sys.stderr, flush=True)
        _progress("warm-up: 3 requests, discarded")
        for _ in range(3):
            await client.complete(32, 8)
        wanted_lengths = args.prompt_lengths if args.prompt_lengths is not None else default_prompt_lengths(limit)
        lengths = [n for n in wanted_lengths if n < limit - 1]
        if len(lengths) < len(wanted_lengths):
            _progress(f"skipped lone prompts of {', '.join(f'{n:,}' for n in wanted_lengths if n >= limit - 1)} tokens: "
                      f"a prompt and its 2 tokens out must fit the context ({limit:,})")
        prefill = await measure_prefill(client, lengths, args.repeats, _progress)
        decode = []
        for n in args.concurrency:
            decode.append(
                await measure_decode(client, n, args.decode_prompt_tokens, args.decode_output_tokens,
                                     args.point_seconds, args.warmup_seconds, _progress)
            )
        for p in args.context_prompt_tokens:
            if p + args.decode_output_tokens <= limit:
                decode.append(
                    await measure_decode(client, args.context_concurrency, p, args.decode_output_tokens,
                                         args.point_seconds, args.warmup_seconds, _progress)
                )
            else:
                _progress(f"skipped the context point of {p:,} tokens: with {args.decode_output_tokens:,} out it "
                          f"exceeds the context ({limit:,})")
        _check_points(prefill, decode, [])
        m = Measurement(args.url, info.model, limit, budget, max_seqs, prefill, decode)
        fit = fit_measurement(prior, m)
        fitted = fit.apply(prior)
        rates: list[Any] = []
        pairs: list[tuple[int, int]] = []
        if trace is not None:
            for p, g in zip(trace.prompt_tokens.tolist(), trace.output_tokens.tolist(), strict=True):
                g = max(1, min(int(g), limit // 4))
                pairs.append((max(1, min(int(p), limit - g - 1)), g))
            if args.rates is not None:
                wanted = list(args.rates)
            else:
                mean_p = float(np.mean([p for p, _ in pairs]))
                mean_g = float(np.mean([g for _, g in pairs]))
                sat = batch_throughput(fitted, prompt_tokens=mean_p, output_tokens=mean_g, min_tok_s_per_user=1e-6,
                                       in_flight=max(args.concurrency)).requests_per_s
                _progress(f"saturation estimate from the fit: {sat:.2f} req/s")
                wanted = [f * sat for f in args.rate_fractions]
            for r in wanted:
                seconds = min(max(args.rate_seconds, args.rate_requests / r), max(args.rate_max_seconds, args.rate_seconds))
                _progress(f"rate {r:7.2f} req/s: sending for {seconds:,.0f} s after a {args.warmup_seconds:g} s warm-up "
                          f"(about {r * seconds:,.0f} requests)")
                rates.append(await measure_rate(client, r, pairs, seconds, args.warmup_seconds, rng, _progress))
            _check_points([], [], rates)
        m = Measurement(args.url, info.model, limit, budget, max_seqs, prefill, decode, rates, pairs,
                        f"{Path(str(args.trace)).name} lengths (outputs ≤ {limit // 4:,}, prompts clipped to the context)")
        if rates:
            _progress("simulating the rate points with the calibrated model")
        figures = note_figures(m, prior, fitted, request_s=fit.request_overhead_s)
    return m, prior, fit, figures


def _document(args: argparse.Namespace, m: Any, prior: Any, fit: Any, figures: list[Any]) -> dict[str, Any]:
    from llmscale.calibrate.note import Figure, itl_spread

    def num(x: float | None, digits: int = 4) -> float | None:
        return None if x is None or not math.isfinite(x) else round(float(x), digits)

    calibration = {
        "bandwidthEfficiency": num(fit.bandwidth_efficiency, 4),
        "computeEfficiency": num(fit.compute_efficiency, 4),
        "stepOverheadSeconds": num(fit.step_overhead_s, 6),
        "sequenceOverheadSeconds": num(fit.seq_overhead_s, 7),
        **({} if fit.attention_efficiency is None else {"attentionEfficiency": num(fit.attention_efficiency, 5)}),
        "source": f"llmscale calibrate --url {m.url} ({m.model}) on "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}",
    }
    spec: dict[str, Any] = {"model": {"calibration": calibration}}
    if args.accelerator is not None:
        a = args.accelerator
        spec["resources"] = {
            "accelerator": {
                "name": a["name"],
                "memoryBytes": int(a["memory"]),
                "memoryBandwidthBytesPerSecond": a["bandwidth"],
                "denseFlops": a["flops"],
            }
        }
    return {
        "url": m.url,
        "model": m.model,
        "accelerator": prior.gpu.name,
        "max_model_len_tokens": m.max_model_len,
        "max_num_batched_tokens": m.max_num_batched_tokens,
        "spec": spec,
        "fit": {
            "bandwidth_efficiency": num(fit.bandwidth_efficiency),
            "compute_efficiency": num(fit.compute_efficiency),
            "step_overhead_s": num(fit.step_overhead_s, 6),
            "seq_overhead_s": num(fit.seq_overhead_s, 7),
            "attention_efficiency": None if fit.attention_efficiency is None else num(fit.attention_efficiency, 5),
            "request_overhead_s": num(fit.request_overhead_s, 6),
            "bandwidth_identified": fit.bandwidth_identified,
            "compute_identified": fit.compute_identified,
            "rms_relative_error": num(fit.rms_relative_error),
            "max_relative_error": num(fit.max_relative_error),
            "observations": fit.observations,
            "prior_bandwidth_efficiency": prior.bandwidth_efficiency,
            "prior_compute_efficiency": prior.compute_efficiency,
        },
        # ITL p95 / p50 of a steady batch (the batch sweep): the scatter the rate points' ITL p95
        # figures are multiplied by (llmscale.calibrate.note.itl_spread).
        "itl_spread": [
            [num(max(d.running, 1.0), 2), num(itl_spread(m, max(d.running, 1.0)), 3)]
            for d in m.decode
            if m.decode and d.context_tokens == m.decode[0].context_tokens
        ],
        "figures": [
            {
                "name": f.name,
                "unit": f.unit,
                "measured": num(f.measured),
                "roofline": num(f.roofline),
                "calibrated": num(f.calibrated),
                "simulated": num(f.simulated),
                "roofline_error": num(Figure.error(f.roofline, f.measured)),
                "calibrated_error": num(Figure.error(f.calibrated, f.measured)),
                "simulated_error": num(Figure.error(f.simulated, f.measured)),
                "fitted": f.fitted,
            }
            for f in figures
        ],
        "rates": [
            {
                "rate_rps": num(r.rate_rps),
                "requests": r.requests,
                "errors": r.errors,
                "running": num(r.running),
                "ttft_p50_s": num(r.ttft.p50_s, 6),
                "ttft_p95_s": num(r.ttft.p95_s, 6),
                "ttft_p99_s": num(r.ttft.p99_s, 6),
                "itl_p50_s": num(r.itl.p50_s, 6),
                "itl_p95_s": num(r.itl.p95_s, 6),
                "itl_p99_s": num(r.itl.p99_s, 6),
            }
            for r in m.rates
        ],
        "decode": [
            {
                "concurrency": d.concurrency,
                "running": num(d.running),
                "context_tokens": num(d.context_tokens),
                "itl_p50_s": num(d.itl.p50_s, 6),
                "itl_p95_s": num(d.itl.p95_s, 6),
                "itl_p99_s": num(d.itl.p99_s, 6),
                "tokens_per_s": num(d.tokens_per_s),
            }
            for d in m.decode
        ],
        "prefill": [
            {
                "prompt_tokens": p.prompt_tokens,
                "ttft_p50_s": num(p.ttft.p50_s, 6),
                "ttft_p95_s": num(p.ttft.p95_s, 6),
                "ttft_p99_s": num(p.ttft.p99_s, 6),
            }
            for p in m.prefill
        ],
    }


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.0%}"


def _val(x: float | None, unit: str) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if unit == "tok/s" else f"{x:,.2f}"


def _render(doc: dict[str, Any]) -> None:
    import yaml
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=150)  # a file or a pipe: wide enough for a row a line
    f = doc["fit"]
    note = Table(
        title=f"Capacity note, measured on {doc['model']} at {doc['url']} ({doc['accelerator']}), beside the roofline",
        caption=(
            f"fit: bandwidth efficiency {f['bandwidth_efficiency']} (prior {f['prior_bandwidth_efficiency']}"
            f"{'' if f['bandwidth_identified'] else ', not reached by the data'}), compute efficiency "
            f"{f['compute_efficiency']} (prior {f['prior_compute_efficiency']}"
            f"{'' if f['compute_identified'] else ', not reached by the data'}), per-step overhead "
            f"{f['step_overhead_s'] * 1e3:.3f} ms, per-sequence {f['seq_overhead_s'] * 1e3:.4f} ms, attention "
            f"efficiency {f['attention_efficiency'] if f['attention_efficiency'] is not None else 'not needed'}, "
            f"per-request {(f.get('request_overhead_s') or 0.0) * 1e3:.2f} ms (added to TTFT); rms error {f['rms_relative_error']:.1%} over {f['observations']} points. "
            "* out of sample (not fitted)."
        ),
    )
    for col in ("figure", "unit", "measured", "roofline", "error", "calibrated", "error", "simulator", "error"):
        note.add_column(col, justify="left" if col == "figure" else "right")
    for fig in doc["figures"]:
        note.add_row(
            fig["name"] + ("" if fig["fitted"] else " *"),
            fig["unit"],
            _val(fig["measured"], fig["unit"]),
            _val(fig["roofline"], fig["unit"]),
            _pct(fig["roofline_error"]),
            _val(fig["calibrated"], fig["unit"]),
            _pct(fig["calibrated_error"]),
            _val(fig["simulated"], fig["unit"]),
            _pct(fig["simulated_error"]),
        )
    console.print(note)
    if doc["rates"]:
        rt = Table(title="Fixed request rates (warm-up discarded)")
        for col in ("req/s", "requests", "failed", "running", "TTFT p50/p95/p99 ms", "ITL p50/p95/p99 ms"):
            rt.add_column(col, justify="right")
        for r in doc["rates"]:
            rt.add_row(
                f"{r['rate_rps']:.2f}", str(r["requests"]), str(r["errors"]), _val(r["running"], ""),
                "/".join(_val(None if r[k] is None else r[k] * 1e3, "") for k in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s")),
                "/".join(_val(None if r[k] is None else r[k] * 1e3, "") for k in ("itl_p50_s", "itl_p95_s", "itl_p99_s")),
            )
        console.print(rt)
    console.print("spec fragment (the operator uses it: merge into the LLMDeployment's spec):")
    console.print(yaml.safe_dump(doc["spec"], sort_keys=False), highlight=False, markup=False)
