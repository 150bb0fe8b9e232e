"""The scheduler limits of a simulated replica, read from the LLMDeployment as the engine reads them.

A replica of an ``LLMDeployment`` runs its engine with ``spec.engine.args`` appended to the
engine's own arguments, so the simulator takes the limits from there too:

- ``--max-num-seqs N`` and ``--max-num-batched-tokens N`` (also written ``--flag=N``): the running
  batch and the per-step token budget (chunked prefill shares it with the decodes). Without them,
  vLLM's OpenAI-server default for the GPU (:func:`llmscale.model.vllm_defaults.vllm_batch_defaults`:
  1024 and 8192 on H100-class GPUs, 256 and 2048 on A100/L40S), as the mock engine does too;
  ``max_num_seqs`` is capped at ``max_num_batched_tokens`` as vLLM caps it.
- ``--enable-prefix-caching`` / ``--no-enable-prefix-caching``: automatic prefix caching (on by
  default in vLLM V1), modelled when the trace carries block hashes.

Every other argument is ignored (it does not change the modelled scheduler). An explicit override
(``llmscale simulate --max-num-batched-tokens``) wins over the spec.

Pure module.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmscale.api import LLMDeploymentSpec
from llmscale.model.presets import gpu_of
from llmscale.model.vllm_defaults import PREFIX_CACHING_DEFAULT, vllm_batch_defaults
from llmscale.sim.replica import EngineConfig

__all__ = ["engine_config", "parse_engine_args"]

_INT_FLAGS = {"--max-num-seqs": "max_num_seqs", "--max-num-batched-tokens": "max_num_batched_tokens"}


def parse_engine_args(args: Sequence[str]) -> dict[str, int | bool]:
    """The scheduler settings in an engine's argument list.

    Args:
        args: ``spec.engine.args``, e.g. ``["--max-num-batched-tokens", "2048"]``.

    Returns:
        Some of ``max_num_seqs`` / ``max_num_batched_tokens`` (positive ints) and
        ``enable_prefix_caching`` (bool); the last occurrence of a flag wins, as with argparse.

    Raises:
        ValueError: a limit flag without a value, or with a value that is not a positive integer
            (the message names ``spec.engine.args``).
    """
    out: dict[str, int | bool] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in _INT_FLAGS:
            if not eq:
                if i + 1 >= len(args):
                    raise ValueError(f"spec.engine.args: {name} needs a value")
                value = args[i + 1]
                i += 1
            try:
                n = int(value)
            except ValueError:
                raise ValueError(f"spec.engine.args: {name} {value!r} is not an integer") from None
            if n < 1:
                raise ValueError(f"spec.engine.args: {name} must be positive, got {n}")
            out[_INT_FLAGS[name]] = n
        elif arg == "--enable-prefix-caching":
            out["enable_prefix_caching"] = True
        elif arg == "--no-enable-prefix-caching":
            out["enable_prefix_caching"] = False
        i += 1
    return out


def engine_config(
    spec: LLMDeploymentSpec,
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    enable_prefix_caching: bool | None = None,
) -> EngineConfig:
    """The :class:`EngineConfig` of one replica of ``spec`` (module docstring); keyword arguments
    override the spec.

    Raises:
        ValueError: as :func:`parse_engine_args`, or limits :class:`EngineConfig` refuses.
    """
    parsed = parse_engine_args(spec.engine.args)
    seqs_default, tokens_default = vllm_batch_defaults(gpu_of(spec.resources))
    tokens = int(max_num_batched_tokens or parsed.get("max_num_batched_tokens") or tokens_default)
    seqs = int(max_num_seqs or parsed.get("max_num_seqs") or seqs_default)
    caching = enable_prefix_caching
    if caching is None:
        caching = bool(parsed.get("enable_prefix_caching", PREFIX_CACHING_DEFAULT))
    return EngineConfig(
        max_num_seqs=min(seqs, tokens),
        max_num_batched_tokens=tokens,
        enable_prefix_caching=caching,
    )
