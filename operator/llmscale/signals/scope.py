"""Scope user PromQL to its LLMDeployment's namespace before it reaches Prometheus.

Pure module (parsing only, no I/O).

llmscale reads Prometheus with one identity for every namespace it watches, so a query a user
writes (``spec.scaling.wake.query``) runs with more reach than its author has: without a check,
``count(kube_secret_info{namespace="team-a"})`` in team B's LLMDeployment reads team A's data and
shows the value in team B's status (a confused deputy; issue 22). The rule is prom-label-proxy's:
every vector and matrix selector in the query, including those inside subqueries and every
alternative of a ``{a="x" or b="y"}`` selector, carries the equality matcher
``<namespace label>="<the LLMDeployment's namespace>"``; further matchers may only narrow it. The
query is also a single expression (the parser refuses ``a; b`` and two expressions side by side),
and ``info()`` is refused: it joins ``target_info`` series that no selector of the query names.

The parser is promql-parser (GreptimeTeam's Rust port of Prometheus's own parser, with Python
bindings). The text checked is the text sent: the query is not rewritten and re-printed (the
binding's printer drops the escapes of string literals and garbles ``or`` selectors), so what
Prometheus evaluates is exactly what this module parsed. Queries are sent one per LLMDeployment,
never joined with another's (:func:`llmscale.signals.queries.wake_query`), so one query cannot
reach into another's answer either.
"""

from __future__ import annotations

from typing import Any

import promql_parser

__all__ = ["UnscopedQuery", "scoped_query"]

#: Functions refused in user queries: they read series no selector of the query names.
_REFUSED_FUNCTIONS = frozenset({"info"})


class UnscopedQuery(ValueError):
    """A user's PromQL does not parse, is not one expression, or reads outside its namespace."""


def _selector_text(node: Any) -> str:
    """The selector as the user wrote it, near enough to find it (the binding's own printer writes
    ``{ or a="1"}`` for ``{a="1"}`` with alternatives)."""
    groups = [node.matchers.matchers] if node.matchers.matchers else []
    groups += node.matchers.or_matchers
    inner = " or ".join(", ".join(str(m) for m in group) for group in groups)
    return f"{node.name or ''}{{{inner}}}"


def scoped_query(query: str, namespace: str, label: str = "namespace") -> str:
    """Return ``query`` unchanged once it is checked to read only ``namespace``.

    Args:
        query: the user's PromQL (after ``$namespace`` and ``$name`` are filled in), an instant
            vector expression.
        namespace: the LLMDeployment's namespace.
        label: the Prometheus label that carries the namespace (``SelectorLabels.namespace``).

    Raises:
        UnscopedQuery: the query does not parse as one instant-vector expression, calls a refused
            function, or has a selector without ``<label>="<namespace>"`` (in every ``or``
            alternative). The message names the first offending selector or function.
    """
    try:
        # Alone first: ``vector(0)) or (vector(1000)`` is one expression only inside ``sum(...)``.
        tree = promql_parser.parse(query)
        # Then as an aggregation's argument, as the reader sends it: the parser checks the type.
        promql_parser.parse(f"sum(\n{query}\n)")
    except ValueError as exc:
        raise UnscopedQuery(f"is not one PromQL instant-vector expression: {exc}") from exc
    problems: list[str] = []

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.Call) and node.func.name in _REFUSED_FUNCTIONS:
            problems.append(f"calls {node.func.name}(), which reads series no selector names")
            return False
        if isinstance(node, promql_parser.VectorSelector):
            groups = [list(node.matchers.matchers)] if node.matchers.matchers else []
            groups += [list(group) for group in node.matchers.or_matchers]
            scoped = bool(groups) and all(
                any(m.op == promql_parser.MatchOp.Equal and m.name == label and m.value == namespace for m in group)
                for group in groups
            )
            if not scoped:
                problems.append(
                    f"selector {_selector_text(node)} lacks the matcher {label}=\"{namespace}\" "
                    f"(write {label}=\"$namespace\" in every selector: a query reads only its own namespace)"
                )
                return False
        return True

    promql_parser.walk(tree, visit)
    if problems:
        raise UnscopedQuery(problems[0])
    return query
