"""The roofline against real GPU kernels: a Llama-shaped decode and prefill step, timed on a GPU.

    # where a CUDA GPU and PyTorch are (numpy and llmscale.model only besides):
    PYTHONPATH=operator python3 benchmarks/gpu_kernels.py measure --gpu h200 --out steps.json
    # anywhere:
    .venv/bin/python benchmarks/gpu_kernels.py compare steps.json [--markdown PATH]

``measure`` builds the preset model's layers (``--model``, shapes from its ``config.json``,
:data:`llmscale.model.presets.PRESET_CONFIGS`) with random BF16 weights, one set per layer, and
times whole steps with CUDA events (median of ``--repeats``, after warm-up):

- decode: ``--batches`` sequences, each with ``--contexts`` tokens of KV cache (a dense cache of
  its own per layer, read by PyTorch's scaled-dot-product attention, each KV head once);
- prefill: one prompt of ``--prompts`` tokens, causal attention;
- mixed: ``--mixed`` decodes with a prompt chunk in the same step (chunked prefill), the linear
  layers run on all rows at once, as vLLM's V1 scheduler batches them.

Every step is captured in a CUDA graph and replayed (launch gaps hidden, as an engine's graphs do).

Each step is QKV, attention, output projection, the gated MLP per layer, and the LM head; norms,
rotary embeddings and sampling are left out. So this is real kernels, not a real engine: no
scheduler, no paged-KV gathers, no sampling. The times are a floor under an engine's step (except
where PyTorch's attention kernel is worse than an engine's: one sequence at a long context), and
the efficiencies fitted to them a ceiling on what the model should be told. They are efficiencies
as the model counts bytes and FLOPs: it counts every parameter, the embedding table included, as
read each step and multiplied for every token, which these steps do not do (about 0.94 of its bytes
read and 0.87 of its prefill FLOPs done, for Llama-3.1-8B).

``compare`` prints, for every step, the measured time beside the roofline's with its default
efficiencies (:data:`~llmscale.model.roofline.DEFAULT_BANDWIDTH_EFFICIENCY`,
:data:`~llmscale.model.roofline.DEFAULT_COMPUTE_EFFICIENCY`), then fits the efficiencies
(:func:`llmscale.model.fit.fit_efficiencies`) and prints the fitted model's error. Results:
``benchmarks/results/gpu-kernels-h200.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from llmscale.model.fit import StepObservation, fit_efficiencies
from llmscale.model.presets import GPU_PRESETS, MODEL_PRESETS, PRESET_CONFIGS
from llmscale.model.roofline import ReplicaModel


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def measure(args: argparse.Namespace) -> int:
    """Time the steps on the first CUDA device; write the observations as JSON to ``args.out``."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("measure needs PyTorch with CUDA (no module named torch here)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("measure needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    cfg = PRESET_CONFIGS[args.model][1]
    hidden, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv_heads, head_dim = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    layers = args.layers or cfg["num_hidden_layers"]
    dev, dt = torch.device("cuda"), torch.bfloat16
    torch.manual_seed(0)

    def w(n_in: int, n_out: int) -> torch.Tensor:
        return torch.randn(n_in, n_out, device=dev, dtype=dt) * n_in**-0.5

    weights = [
        {"qkv": w(hidden, (heads + 2 * kv_heads) * head_dim), "o": w(heads * head_dim, hidden),
         "gate_up": w(hidden, 2 * inter), "down": w(inter, hidden)}
        for _ in range(layers)
    ]
    lm_head = w(hidden, vocab)
    q_width, kv_width = heads * head_dim, kv_heads * head_dim

    def mlp(x: torch.Tensor, lw: dict[str, torch.Tensor]) -> torch.Tensor:
        gate, up = (x @ lw["gate_up"]).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ lw["down"]

    group = heads // kv_heads

    def step(x: torch.Tensor, batch: int, caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """One engine step: the first ``batch`` rows of ``x`` decode against ``caches``, the rest are
        one prompt chunk (causal among itself); the linear layers run on all rows at once."""
        n = x.shape[0]
        p = n - batch
        for i, lw in enumerate(weights):
            qkv = x @ lw["qkv"]
            parts = []
            if batch:
                # One token per sequence: a KV head's query heads attend as query rows (grouped-query
                # packing), so no KV head is repeated.
                k, v = caches[i]
                q = qkv[:batch, :q_width].view(batch, kv_heads, group, head_dim)
                parts.append(F.scaled_dot_product_attention(q, k, v).reshape(batch, q_width))
            if p:
                c = qkv[batch:]
                q = c[:, :q_width].view(p, heads, head_dim).transpose(0, 1)[None]
                k = c[:, q_width:q_width + kv_width].view(p, kv_heads, head_dim).transpose(0, 1)[None]
                v = c[:, q_width + kv_width:].view(p, kv_heads, head_dim).transpose(0, 1)[None]
                a = F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1),
                                                   v.repeat_interleave(group, dim=1), is_causal=True)
                parts.append(a[0].transpose(0, 1).reshape(p, q_width))
            a = parts[0] if len(parts) == 1 else torch.cat(parts)
            x = mlp(x + a @ lw["o"], lw)
        # Logits for every decoding sequence and the chunk's last token.
        return (torch.cat([x[:batch], x[-1:]]) if p else x) @ lm_head

    def timed(fn: Any) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(args.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return float(statistics.median(times))

    def point(batch: int, context: int, prompt: int) -> dict[str, float] | None:
        """Time one step shape in a CUDA graph; ``None`` when its KV cache is over ``--max-kv-gib``."""
        kv_bytes = 2 * layers * batch * context * kv_width * 2
        what = _label(batch, batch * context, prompt)
        if kv_bytes > args.max_kv_gib * 2**30:
            print(f"skip {what}: {kv_bytes / 2**30:.0f} GiB of KV cache > --max-kv-gib {args.max_kv_gib}",
                  flush=True)
            return None
        caches = [(torch.randn(batch, kv_heads, context, head_dim, device=dev, dtype=dt),
                   torch.randn(batch, kv_heads, context, head_dim, device=dev, dtype=dt))
                  for _ in range(layers)] if batch else []
        x = torch.randn(batch + prompt, hidden, device=dev, dtype=dt)
        with torch.inference_mode():
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    step(x, batch, caches)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step(x, batch, caches)
            seconds = timed(graph.replay)
        print(f"{what}: {seconds * 1e3:8.3f} ms", flush=True)
        del caches, graph
        torch.cuda.empty_cache()
        return {"decode_seqs": batch, "kv_tokens_read": batch * context, "prefill_tokens": prompt,
                "seconds": seconds}

    shapes = [(b, c, 0) for c in _ints(args.contexts) for b in _ints(args.batches)]
    shapes += [(0, 0, p) for p in _ints(args.prompts)]
    shapes += [tuple(int(v) for v in m.split(":")) for m in args.mixed.split(",") if m]  # type: ignore[misc]
    steps = [got for b, c, p in shapes if (got := point(b, c, p)) is not None]
    out = {"model": args.model, "gpu": args.gpu, "layers": layers, "device": torch.cuda.get_device_name(),
           "torch": torch.__version__, "repeats": args.repeats, "steps": steps}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _label(decode_seqs: float, kv_tokens_read: float, prefill_tokens: float) -> str:
    """A step's shape in words: ``decode 64 × context 2048 + prompt chunk 512``, ``prompt 4096``."""
    if not decode_seqs:
        return f"prompt {prefill_tokens:.0f}"
    what = f"decode {decode_seqs:.0f} × context {kv_tokens_read / decode_seqs:.0f}"
    return what + (f" + prompt chunk {prefill_tokens:.0f}" if prefill_tokens else "")


def _model(measured: dict[str, Any]) -> ReplicaModel:
    """The roofline replica the measurement stands for: the preset model on the preset GPU, default
    efficiencies.

    Raises:
        ValueError: the measurement built fewer layers than the model has (``measure --layers``).
    """
    arch = MODEL_PRESETS[measured["model"]]
    full = PRESET_CONFIGS[measured["model"]][1]["num_hidden_layers"]
    if measured["layers"] != full:
        raise ValueError(f"compare needs all {full} layers measured, got {measured['layers']}")
    return ReplicaModel(arch=arch, gpu=GPU_PRESETS[measured["gpu"]])


def table(measured: dict[str, Any]) -> str:
    """Markdown: each measured step (``measure``'s JSON) beside the roofline's time with default and
    with fitted efficiencies, then the fitted figures."""
    model = _model(measured)
    obs = [StepObservation(s["decode_seqs"], s["kv_tokens_read"], s["prefill_tokens"], s["seconds"])
           for s in measured["steps"]]
    fit = fit_efficiencies(model, obs)
    fitted = fit.apply(model)
    lines = [
        f"Measured on {measured['device']} (torch {measured['torch']}), {measured['model']} on the "
        f"`{measured['gpu']}` preset, median of {measured['repeats']} steps each.",
        "",
        "| step | measured | roofline (defaults) | error | roofline (fitted) | error |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for ob in obs:
        before = model.step_time(ob.decode_seqs, ob.kv_tokens_read, ob.prefill_tokens)
        after = fitted.step_time(ob.decode_seqs, ob.kv_tokens_read, ob.prefill_tokens)
        what = _label(ob.decode_seqs, ob.kv_tokens_read, ob.prefill_tokens)
        lines.append(f"| {what} | {ob.seconds * 1e3:.2f} ms | {before * 1e3:.2f} ms | "
                     f"{(before - ob.seconds) / ob.seconds:+.0%} | {after * 1e3:.2f} ms | "
                     f"{(after - ob.seconds) / ob.seconds:+.0%} |")
    att = "not kept" if fit.attention_efficiency is None else f"{fit.attention_efficiency:.3f}"
    lines += [
        "",
        f"Fitted: bandwidth efficiency {fit.bandwidth_efficiency:.3f} "
        f"(default {model.bandwidth_efficiency}), "
        f"compute efficiency {fit.compute_efficiency:.3f} (default {model.compute_efficiency}), "
        f"step overhead {fit.step_overhead_s * 1e3:.3f} ms, "
        f"per-sequence overhead {fit.seq_overhead_s * 1e6:.2f} µs, attention efficiency {att}; "
        f"rms error {fit.rms_relative_error:.1%}, worst {fit.max_relative_error:.1%}"
        f" ({fit.observations} steps; bandwidth identified: {fit.bandwidth_identified}, compute identified: "
        f"{fit.compute_identified}).",
    ]
    return "\n".join(lines)


def compare(args: argparse.Namespace) -> int:
    """Print :func:`table` for ``args.measured``; also write it to ``args.markdown`` when given."""
    text = table(json.loads(Path(args.measured).read_text()))
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run ``measure`` or ``compare``; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    m = verbs.add_parser("measure", help="time the steps on a CUDA GPU (needs PyTorch)")
    m.add_argument("--model", default="llama-3.1-8b", choices=sorted(PRESET_CONFIGS))
    m.add_argument("--gpu", default="h200", choices=sorted(GPU_PRESETS), help="the preset the GPU stands for")
    m.add_argument("--layers", type=int, default=0,
                   help="layers to build (0: the model's own; compare needs all)")
    m.add_argument("--batches", default="1,8,32,64,128,256", help="decode batch sizes")
    m.add_argument("--contexts", default="512,2048,8192", help="KV tokens per decoding sequence")
    m.add_argument("--prompts", default="256,1024,4096,8192", help="prefill prompt lengths")
    m.add_argument("--mixed", default="16:2048:512,16:2048:2048,64:2048:512,64:2048:2048,256:512:512",
                   help="mixed steps, BATCH:CONTEXT:CHUNK (chunked prefill riding with decodes)")
    m.add_argument("--repeats", type=int, default=20, help="timed steps per point (median)")
    m.add_argument("--max-kv-gib", type=float, default=96.0, help="skip decode points with a bigger KV cache")
    m.add_argument("--out", required=True, help="JSON file to write")
    c = verbs.add_parser("compare", help="measured against the roofline, before and after the fit")
    c.add_argument("measured", help="JSON written by measure")
    c.add_argument("--markdown", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)
    return measure(args) if args.verb == "measure" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
