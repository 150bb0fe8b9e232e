"""``llmscale batch``: the batch client a batch Job runs, and the size of its input.

``llmscale batch run --input requests.jsonl --output results.jsonl --url http://chat-batch:8000``
sends every request of an OpenAI batch file and writes one result a line, exactly once across
pauses, drains, kills and reruns (:mod:`llmscale.batch`). ``llmscale batch size --input
requests.jsonl`` prints the Job annotations that tell the operator how big the input is.

Exit statuses of ``run`` (docs/batch.md):

- 0: every request of the input (or shard) has a result in the output;
- 1: runtime failure: requests left without a result after their retries, or the output cannot be
  written or read back (a rerun resumes);
- 2: usage error: bad flags, an input that does not validate (the message names the line);
- 75 (``EX_TEMPFAIL`` of BSD's sysexits.h, "try again later"): stopped by SIGTERM (the Job was
  suspended, the node drained) with work left; everything written is kept and a rerun resumes. A
  Job's ``podFailurePolicy`` can ``Ignore`` it so that a pause never counts as a failure;
- 130: stopped by SIGINT (Ctrl-C), the same graceful stop, with work left (the CLI's convention).

``--output`` is the results *file* here, as issue 13 names it; ``batch size`` keeps the CLI's
convention, ``-o/--output yaml|json`` for what it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from llmscale.commands.output import add_output_argument, write_document

if TYPE_CHECKING:
    from llmscale.batch.client import BatchMetrics, ClientSettings, RunStats
    from llmscale.batch.progress import Reporter
    from llmscale.batch.requests import BatchRequest
    from llmscale.batch.results import ResultsFile

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PAUSED", "EXIT_USAGE", "add_arguments", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: ``EX_TEMPFAIL`` (sysexits.h): stopped by SIGTERM before the end, resumable.
EXIT_PAUSED = 75
#: Stopped by SIGINT (Ctrl-C) before the end, resumable: 128 + SIGINT, the CLI's convention.
EXIT_INTERRUPTED = 130

log = logging.getLogger("llmscale.batch")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds ≥ 0, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``run`` and ``size`` sub-verbs of ``llmscale batch`` to ``parser``."""
    sub = parser.add_subparsers(dest="batch_verb", metavar="SUBVERB", required=True)

    run = sub.add_parser(
        "run",
        help="send an OpenAI batch file to a server, one result a line, resumable",
        description="Send every request of an OpenAI batch file (custom_id, method, url, body per line) to "
        "--url and append one result a line to --output, fsynced; a rerun skips what is done. Exit 0 done, "
        "1 failed (rerun to resume), 2 usage or input error, 75 stopped by SIGTERM, 130 by SIGINT (rerun to resume).",
    )
    run.add_argument("--input", type=Path, required=True, metavar="JSONL", help="the batch input file")
    # The issue fixes `--output results.jsonl` for this verb: here --output is the results *file*
    # (no -o, which names a stdout format everywhere else in the CLI).
    run.add_argument(
        "--output",
        type=Path,
        required=True,
        metavar="JSONL",
        help="the results file, appended to (and read back to skip done requests); "
        "{shard} is replaced by the shard index",
    )
    run.add_argument(
        "--url",
        required=True,
        help="base URL of the OpenAI-compatible server, e.g. http://chat-batch:8000 (the <name>-batch Service)",
    )
    run.add_argument(
        "--concurrency", type=_positive_int, default=64, metavar="N", help="requests in flight (default 64)"
    )
    run.add_argument(
        "--max-attempts",
        type=_positive_int,
        default=10,
        metavar="N",
        help="tries per request before leaving it to a rerun (default 10)",
    )
    run.add_argument(
        "--backoff-base",
        type=_non_negative,
        default=1.0,
        metavar="SECONDS",
        help="first backoff ceiling; doubles per retry, full jitter (default 1)",
    )
    run.add_argument(
        "--backoff-max",
        type=_non_negative,
        default=60.0,
        metavar="SECONDS",
        help="largest backoff ceiling (default 60)",
    )
    run.add_argument(
        "--request-timeout",
        type=_non_negative,
        default=600.0,
        metavar="SECONDS",
        help="time one attempt may take (default 600)",
    )
    run.add_argument(
        "--grace",
        type=_non_negative,
        default=25.0,
        metavar="SECONDS",
        help="after SIGTERM, time the requests in flight get to finish (default 25, under the pod's 30 s)",
    )
    run.add_argument(
        "--shards",
        type=_positive_int,
        default=1,
        metavar="N",
        help="split the input into N shards by line position; run one (for an Indexed Job of N completions)",
    )
    run.add_argument(
        "--shard-index",
        type=int,
        default=None,
        metavar="I",
        help="the shard to run, 0…N−1 (default: $JOB_COMPLETION_INDEX, set in an Indexed Job's pods)",
    )
    run.add_argument(
        "--progress",
        choices=("auto", "bar", "plain", "off"),
        default="auto",
        help="auto: a bar on a terminal, quiet otherwise; plain: a log line every --progress-interval",
    )
    run.add_argument(
        "--progress-interval",
        type=_non_negative,
        default=30.0,
        metavar="SECONDS",
        help="for --progress plain",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics (llmscale_batch_requests_done, …) on this port (default: off)",
    )
    run.add_argument(
        "--metrics-address", default="0.0.0.0", help="address for --metrics-port (default 0.0.0.0, for a pod)"
    )
    run.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="bearer token for the server (default: $OPENAI_API_KEY; vLLM's --api-key)",
    )
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    size = sub.add_parser(
        "size",
        help="print the Job annotations that declare an input's size",
        description="Count the requests, prompt tokens (estimated, 4 bytes a token) and output tokens "
        "(max_tokens, else 256) of an OpenAI batch file and print them as the llmscale.dev/batch-* Job "
        "annotations (YAML), for the operator to size the batch pool.",
    )
    size.add_argument("--input", type=Path, required=True, metavar="JSONL", help="the batch input file")
    add_output_argument(size, ("yaml", "json"), "yaml")


def _usage(message: str) -> int:
    print(f"llmscale batch: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(args: argparse.Namespace) -> int:
    """Run ``llmscale batch run`` or ``llmscale batch size``; return the exit status."""
    if args.batch_verb == "size":
        return _size(args)
    return _run(args)


def _size(args: argparse.Namespace) -> int:
    from llmscale.batch.requests import BatchInputError, read_requests
    from llmscale.batch.size import batch_size

    try:
        requests = read_requests(args.input)
    except BatchInputError as exc:
        return _usage(str(exc))
    write_document({"metadata": {"annotations": batch_size(requests).annotations()}}, args.output)
    return EXIT_OK


def _shard(args: argparse.Namespace) -> tuple[int, int] | str:
    count: int = args.shards
    index = args.shard_index
    if index is None:
        env = os.environ.get("JOB_COMPLETION_INDEX")
        if count == 1:
            index = 0
        elif env is None:
            return "--shards > 1 needs --shard-index or $JOB_COMPLETION_INDEX"
        else:
            try:
                index = int(env)
            except ValueError:
                return f"$JOB_COMPLETION_INDEX is {env!r}, not an integer"
    if not 0 <= index < count:
        return f"shard index {index} is not in 0…{count - 1}"
    return index, count


def _run(args: argparse.Namespace) -> int:
    import yarl

    from llmscale.batch.client import BatchMetrics, ClientSettings
    from llmscale.batch.progress import make_reporter
    from llmscale.batch.requests import BatchInputError, read_requests, select_shard
    from llmscale.batch.results import OutputError, ResultsFile

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(levelname)s %(asctime)s [%(name)s] %(message)s",
        datefmt="%m-%d %H:%M:%S",
    )
    url = yarl.URL(args.url)
    if url.scheme not in ("http", "https") or not url.host:
        return _usage(f"--url {args.url!r} is not an http(s) URL with a host")
    shard = _shard(args)
    if isinstance(shard, str):
        return _usage(shard)
    index, count = shard
    try:
        requests = select_shard(read_requests(args.input), index, count)
    except BatchInputError as exc:
        return _usage(str(exc))
    output = Path(str(args.output).replace("{shard}", str(index)))
    try:
        settings = ClientSettings(
            url=args.url,
            concurrency=args.concurrency,
            max_attempts=args.max_attempts,
            backoff_base_s=args.backoff_base,
            backoff_max_s=args.backoff_max,
            request_timeout_s=max(args.request_timeout, 1e-3),
            grace_s=args.grace,
            api_key=args.api_key,
        )
    except ValueError as exc:
        return _usage(str(exc))

    try:
        results = ResultsFile.open(output)
    except OutputError as exc:
        log.error("Refused to run batch %s: %s", args.input, exc)
        return EXIT_FAILED
    with results:
        ids = {r.custom_id for r in requests}
        if results.torn_bytes:
            log.warning(
                "Cut a torn last line (%d bytes) from %s: its request runs again", results.torn_bytes, output
            )
        if results.duplicates:
            log.warning(
                "Found %d repeated custom_ids in %s (written by another tool?)", results.duplicates, output
            )
        foreign = len(results.done - ids)
        if foreign:
            log.warning(
                "Found %d results in %s whose custom_id is not in this input (shard)", foreign, output
            )
        done = len(results.done & ids)
        shard_text = f" shard {index} of {count}" if count > 1 else ""
        log.info(
            "Started batch %s%s: %d requests, %d already in %s, to %s with %d in flight",
            args.input,
            shard_text,
            len(requests),
            done,
            output,
            args.url,
            settings.concurrency,
        )
        metrics = BatchMetrics() if args.metrics_port is not None else None
        if metrics is not None:
            from prometheus_client import start_http_server

            try:
                start_http_server(args.metrics_port, args.metrics_address, registry=metrics.registry)
            except OSError as exc:
                log.error("Refused to run batch %s: metrics port %s: %s", args.input, args.metrics_port, exc)
                return EXIT_FAILED
        stopped_by: list[signal.Signals] = []
        try:
            stats = asyncio.run(
                _serve(
                    requests,
                    results,
                    settings,
                    make_reporter(args.progress, args.progress_interval),
                    metrics,
                    stopped_by,
                )
            )
        except OutputError as exc:
            log.error("Stopped batch %s: %s; results written before it are kept", args.input, exc)
            return EXIT_FAILED

    summary = (
        f"{stats.succeeded} succeeded and {stats.failed} failed this run, {stats.already_done} done before, "
        f"{stats.remaining} without a result ({stats.retries} retries)"
    )
    if stats.stopped and stats.remaining:
        log.info("Paused batch %s%s: %s; a rerun resumes", args.input, shard_text, summary)
        return EXIT_INTERRUPTED if stopped_by == [signal.SIGINT] else EXIT_PAUSED
    if stats.remaining:
        log.error(
            "Finished batch %s%s with requests left: %s; a rerun retries them",
            args.input,
            shard_text,
            summary,
        )
        return EXIT_FAILED
    log.info("Completed batch %s%s: %s", args.input, shard_text, summary)
    return EXIT_OK


async def _serve(
    requests: list[BatchRequest],
    results: ResultsFile,
    settings: ClientSettings,
    reporter: Reporter,
    metrics: BatchMetrics | None,
    stopped_by: list[signal.Signals],
) -> RunStats:
    """Run the batch with SIGTERM and SIGINT wired to a graceful stop (the first signal is
    appended to ``stopped_by``)."""
    from llmscale.batch.client import run_batch

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, _stopper(stop, sig, stopped_by))
    return await run_batch(
        requests, results, settings, reporter=reporter, stop=stop, metrics=metrics
    )


def _stopper(
    stop: asyncio.Event, sig: signal.Signals, stopped_by: list[signal.Signals]
) -> Callable[[], None]:
    def handler() -> None:
        if not stop.is_set():
            stopped_by.append(sig)
            log.info("Received %s: stopped sending batch requests, finishing the ones in flight", sig.name)
        stop.set()

    return handler
