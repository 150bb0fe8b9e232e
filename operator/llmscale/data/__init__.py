"""Data shipped inside the ``llmscale`` package: real request traces and the credit each one needs.

The traces live in ``llmscale/data/traces/`` (package data: a ``pip install`` ships them, so nothing
outside the installed package is read). :data:`BUNDLED_TRACES` lists them with their format, licence
and citation; :func:`trace_path` returns a file to read; :func:`resolve_trace` turns a command-line
``--trace`` value (a bundled trace's name or a file path) into a file. Whoever shows a trace, or
figures derived from one, shows its :attr:`BundledTrace.attribution` (the licences require it;
``llmscale/data/traces/README.md`` and the repository's NOTICE say the same).

Files are reached through :mod:`importlib.resources`, so an installed package (wheel, zip or
editable) is found wherever it lies. Pure module except :func:`trace_path`, which may extract a file
from a zipped package into a temporary file that lives until the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

__all__ = [
    "BUNDLED_TRACES",
    "DEFAULT_TRACE",
    "BundledTrace",
    "TraceFormat",
    "bundled_trace_for",
    "resolve_trace",
    "trace_path",
]

#: Request-trace file formats: the Azure LLM inference trace CSV
#: (``TIMESTAMP,ContextTokens,GeneratedTokens[,Class]``) and the Mooncake JSONL
#: (``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``).
TraceFormat = Literal["azure-csv", "mooncake-jsonl"]


@dataclass(frozen=True)
class BundledTrace:
    """One trace shipped with the package, and what must accompany it wherever it is shown.

    Attributes:
        name: the key in :data:`BUNDLED_TRACES` and the value ``--trace`` accepts, e.g.
            ``azure-llm-2023-conv``.
        filename: the file in ``llmscale/data/traces/``.
        format: how to read it (:data:`TraceFormat`).
        title: the data set's name as its publisher gives it.
        licence: SPDX identifier of the data's licence (``CC-BY-4.0``, ``Apache-2.0``).
        source: where the file comes from (publisher, repository and original file).
        citation: the paper to cite, in full.
        attribution: one line to print under every table or plot made from the trace: title,
            licence and short citation.
        requests: number of requests in the file.
        duration_s: time from the first to the last arrival, seconds.
    """

    name: str
    filename: str
    format: TraceFormat
    title: str
    licence: str
    source: str
    citation: str
    attribution: str
    requests: int
    duration_s: float


_TRACES = (
    BundledTrace(
        name="azure-llm-2023-conv",
        filename="azure-llm-2023-conv.csv",
        format="azure-csv",
        title="Azure LLM inference trace 2023 (conversation)",
        licence="CC-BY-4.0",
        source="Azure Public Dataset, https://github.com/Azure/AzurePublicDataset "
        "(AzureLLMInferenceTrace_conv.csv): one hour, 2023-11-16 18:15-19:14 UTC, of requests to a "
        "production LLM conversation service",
        citation='Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed Maleki, '
        'Ricardo Bianchini. "Splitwise: Efficient generative LLM inference using phase splitting". '
        "ISCA 2024",
        attribution="Azure LLM inference trace 2023, CC-BY 4.0; Patel et al., Splitwise, ISCA 2024",
        requests=19_366,
        duration_s=3_501.7219370,
    ),
    BundledTrace(
        name="mooncake-conversation",
        filename="mooncake-conversation-trace.jsonl",
        format="mooncake-jsonl",
        title="Mooncake conversation trace (Kimi)",
        licence="Apache-2.0",
        source="kvcache-ai/Mooncake, https://github.com/kvcache-ai/Mooncake "
        "(FAST25-release/traces/conversation_trace.jsonl): one hour of requests to Moonshot AI's "
        "Kimi conversation service",
        citation='Ruoyu Qin et al. "Mooncake: Trading More Storage for Less Computation — A '
        'KVCache-centric Architecture for Serving LLM Chatbot". USENIX FAST 2025',
        attribution="Mooncake conversation trace (Kimi), Apache-2.0; Qin et al., Mooncake, USENIX FAST 2025",
        requests=12_031,
        duration_s=3_536.999,
    ),
)

#: The bundled traces by name, in a fixed order.
BUNDLED_TRACES: dict[str, BundledTrace] = {t.name: t for t in _TRACES}

#: The trace ``llmscale simulate`` and ``llmscale demo`` replay when given none.
DEFAULT_TRACE = "azure-llm-2023-conv"

# Files extracted from a zipped package stay until the interpreter exits (certifi's ``where()``
# does the same); for a package on disk ``as_file`` returns the file itself and extracts nothing.
_EXTRACTED = contextlib.ExitStack()
atexit.register(_EXTRACTED.close)


def trace_path(name: str = DEFAULT_TRACE) -> Path:
    """Return a readable file of the bundled trace ``name`` (a key of :data:`BUNDLED_TRACES`).

    Raises:
        KeyError: ``name`` is not a bundled trace (the message lists those that are).
        FileNotFoundError: the package was installed without its data files.
    """
    try:
        trace = BUNDLED_TRACES[name]
    except KeyError:
        raise KeyError(f"no bundled trace {name!r}; bundled: {', '.join(BUNDLED_TRACES)}") from None
    ref = resources.files(__name__).joinpath("traces", trace.filename)
    if not ref.is_file():
        raise FileNotFoundError(f"bundled trace {trace.filename} is missing from the installed llmscale package")
    return _EXTRACTED.enter_context(resources.as_file(ref))


def resolve_trace(value: str | Path | None) -> Path:
    """Return the file a ``--trace`` value names: ``None`` is :data:`DEFAULT_TRACE`, a bundled
    trace's name is its packaged file, anything else is a path (returned as given, unchecked).

    Raises:
        FileNotFoundError: a bundled trace's file is missing from the installed package.
    """
    if value is None:
        return trace_path(DEFAULT_TRACE)
    if isinstance(value, str) and value in BUNDLED_TRACES:
        return trace_path(value)
    return Path(value)


def bundled_trace_for(path: str | Path) -> BundledTrace | None:
    """Return the bundled trace whose file ``path`` is (matched by file name), else ``None``.

    Lets a report credit a bundled trace passed by path, e.g. a copy in another folder.
    """
    filename = Path(path).name
    return next((t for t in _TRACES if t.filename == filename), None)
