"""``llmscale render``: print the objects the operator would create for LLMDeployment manifests,
with no cluster (as ``helm template`` does for a chart).

Examples::

    llmscale render -f manifests/samples/chat.yaml
    kustomize build overlays/prod | llmscale render -f - -o json
    llmscale render -f chat.yaml | kubectl diff --server-side -f -
    llmscale render --inference-pools -f chat.yaml

Each LLMDeployment of the input (a file of one or more YAML documents; other kinds are skipped
with a note on stderr) is read as the operator reads it, and its children are built by the
operator's own builders (:func:`llmscale.controller.manifests.children.child_manifests`): the Services, the
PodDisruptionBudget and each pool's Deployment with the vLLM/SGLang command, probes, grace period
and ``spec.template`` merged in, at the replicas the operator starts with (one replica of demand plus
the warm headroom, within ``spec.replicas``; the batch pool at 0). The owner reference's ``uid`` is a placeholder (the
API server assigns the real one). An object in ``Advisory`` or ``Paused`` mode, or with
``spec.scaleTargetRef``, gets no children (said on stderr). The warm-node placeholder Deployment
(``spec.headroom.warmNodes``) is sized by the running tick and is not printed. The InferencePool the
operator applies only where the cluster serves the Gateway API Inference Extension
(``spec.routing``) is printed after each object's children with ``--inference-pools``.

Exit status: 0; 2 when the input cannot be read, is not YAML, holds no LLMDeployment, or a spec is
invalid (one line per bad field, as kubectl writes them; the operator reports the same problems in
``Ready=False/InvalidSpec``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from llmscale.api import API_VERSION, KIND
from llmscale.commands.output import add_output_argument, write_document
from llmscale.controller.manifests.children import PriorityClasses, child_manifests, initial_replicas
from llmscale.controller.manifests.inferencepool import inference_pool_manifest
from llmscale.controller.manifests.names import owner_reference
from llmscale.controller.spec import InvalidSpec, read_spec
from llmscale.controller.status.mode import writes_workload

__all__ = ["PLACEHOLDER_UID", "add_arguments", "main", "render"]

#: The owner reference's uid in rendered children: the API server assigns the real one on create.
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"


class RenderError(Exception):
    """An input the operator would refuse: the message names the object and the field."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``llmscale render`` to ``parser``."""
    parser.add_argument("-f", "--filename", required=True, metavar="FILE",
                        help="YAML file of LLMDeployments (one or more documents); - reads stdin")
    parser.add_argument("-n", "--namespace", default="default", metavar="NS",
                        help="namespace of objects whose metadata has none (default: default)")
    parser.add_argument("--interactive-priority-class", default="llmscale-interactive", metavar="NAME",
                        help="priorityClassName of the interactive pool's pods, as the chart sets it "
                        "(default llmscale-interactive; '' for none, as `llmscale run` without the chart)")
    parser.add_argument("--batch-priority-class", default="llmscale-batch", metavar="NAME",
                        help="priorityClassName of the batch pool's pods (default llmscale-batch; '' for none)")
    parser.add_argument("--inference-pools", action="store_true",
                        help="also print each InferencePool the operator applies where the cluster has the "
                        "Gateway API Inference Extension (spec.routing.inferencePool: Auto)")
    add_output_argument(parser, ("yaml", "json"), "yaml")


def render(docs: list[Any], namespace: str, priority_classes: PriorityClasses,
           notes: list[str] | None = None, *, inference_pools: bool = False) -> list[dict[str, Any]]:
    """Return the children the operator would apply for the LLMDeployments among ``docs``, in
    the operator's apply order, object after object. ``notes`` receives one line per object
    skipped (another kind, or one the operator writes no children for). With ``inference_pools``,
    each object's InferencePool follows its children (where ``spec.routing.inferencePool`` is
    ``Auto``), as the operator applies it on a cluster that serves the kind.

    Raises:
        RenderError: a document is not a mapping, holds no LLMDeployment at all, or a spec the
            operator would refuse (the message: ``LLMDeployment <ns>/<name>: <field>: <problem>``).
    """
    notes = [] if notes is None else notes
    out: list[dict[str, Any]] = []
    seen = 0
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise RenderError(f"document {i + 1} is not a mapping")
        if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
            notes.append(f"skipped {doc.get('kind') or 'a document without kind'} "
                         f"{(doc.get('metadata') or {}).get('name') or ''}: not an {API_VERSION} {KIND}".rstrip())
            continue
        seen += 1
        meta = dict(doc.get("metadata") or {})
        meta.setdefault("namespace", namespace)
        meta.setdefault("uid", PLACEHOLDER_UID)
        body = {**doc, "metadata": meta}
        where = f"{KIND} {meta['namespace']}/{meta.get('name') or '<no name>'}"
        try:
            spec = read_spec(body)
        except InvalidSpec as exc:
            raise RenderError("\n".join(f"{where}: {line}" for line in exc.lines)) from None
        if spec.scale_target_ref is not None:
            notes.append(f"{where}: no children: it scales the existing {spec.scale_target_ref} through /scale")
            continue
        if not writes_workload(spec):
            notes.append(f"{where}: no children: spec.mode is {spec.mode}")
            continue
        try:
            out += child_manifests(body, spec, initial_replicas(spec), 0, priority_classes)
            if inference_pools and spec.routing.inference_pool == "Auto":
                out.append(inference_pool_manifest(meta["name"], meta["namespace"], spec, owner_reference(body)))
        except ValueError as exc:
            raise RenderError(f"{where}: {exc}") from None
    if not seen:
        raise RenderError(f"no {API_VERSION} {KIND} in the input")
    return out


def main(args: argparse.Namespace) -> int:
    """Run ``llmscale render``; return the exit status (module docstring)."""
    source = "stdin" if args.filename == "-" else args.filename
    try:
        text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text(encoding="utf-8")
    except OSError as exc:
        print(f"llmscale render: error: cannot read {source}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        print(f"llmscale render: error: {source}: not YAML{at}: {getattr(exc, 'problem', None) or exc}",
              file=sys.stderr)
        return 2
    classes = PriorityClasses(args.interactive_priority_class or None, args.batch_priority_class or None)
    notes: list[str] = []
    try:
        objects = render(docs, args.namespace, classes, notes, inference_pools=args.inference_pools)
    except RenderError as exc:
        for line in str(exc).splitlines():
            print(f"llmscale render: error: {source}: {line}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"llmscale render: {note}", file=sys.stderr)
    if args.output == "json":
        write_document({"apiVersion": "v1", "kind": "List", "items": objects}, "json")
    else:
        sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, allow_unicode=True))
    return 0
