"""User PromQL is scoped to its LLMDeployment's namespace (issue 22): every selector carries
``namespace="<ns>"``, the query is one instant-vector expression, and nothing else is sent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from tests.strategies import PromQLTree, promql_trees

from llmscale.signals.scope import UnscopedQuery, scoped_query

NS = "team-b"

SCOPED = [
    pytest.param('sum(gateway_pending{namespace="team-b", service="chat"})', id="plain"),
    pytest.param('sum(gateway_pending{namespace="team-b"}) or vector(0)', id="or-vector-0"),
    pytest.param("vector(0)", id="no-selector"),
    pytest.param('rate(gateway_requests_total{namespace="team-b"}[1m])', id="matrix"),
    pytest.param('max_over_time(rate(q{namespace="team-b"}[1m])[5m:1m])', id="subquery"),
    pytest.param('q{namespace="team-b"} offset 1h', id="offset"),
    pytest.param('q{namespace="team-b"} @ 1700000000', id="at"),
    pytest.param('q{namespace="team-b"} @ start()', id="at-start"),
    pytest.param('q{namespace="team-b", namespace=~".*"}', id="extra-namespace-matcher-only-narrows"),
    pytest.param('{__name__=~".+", namespace="team-b"}', id="any-metric-of-its-own-namespace"),
    pytest.param('clamp_min(sum by (x) (abs(q{namespace="team-b"})), 0)', id="nested-functions"),
    pytest.param('label_replace(q{namespace="team-b"}, "namespace", "team-a", "", "")', id="relabelled-output"),
    pytest.param('q{namespace="team-b" or namespace="team-b", a="1"}', id="or-selector-every-alternative"),
    pytest.param('sum(q{namespace="team-b"}) # a comment )))\nor vector(0)', id="comment"),
    pytest.param('a{namespace="team-b"} + on (x) group_left b{namespace="team-b"}', id="join"),
]


@pytest.mark.parametrize("query", SCOPED)
def test_a_query_that_reads_only_its_namespace_is_sent_as_written(query: str) -> None:
    assert scoped_query(query, NS) == query


UNSCOPED = [
    pytest.param(
        'vector(0)), "llmscale_wake", "evil", "", "") or label_replace(label_replace(vector(1000), '
        '"llmscale_wake", "0", "", ""), "x", "1", "", "") or label_replace(sum(vector(0)',
        "is not one PromQL instant-vector expression", id="issue-22-injection",
    ),
    pytest.param('count(kube_secret_info{namespace="team-a"})', 'kube_secret_info{namespace="team-a"} lacks',
                 id="issue-22-other-namespace"),
    pytest.param("count(kube_secret_info)", "kube_secret_info{} lacks", id="missing-namespace"),
    pytest.param('q{namespace=~"team-.*"}', 'q{namespace=~"team-.*"} lacks', id="namespace-regex"),
    pytest.param('q{namespace=~"team-b"}', "lacks", id="namespace-regex-of-its-own-name"),
    pytest.param('q{namespace!="team-b"}', "lacks", id="namespace-not-equal"),
    pytest.param('q{namespace="team-b"} or kube_secret_info', "kube_secret_info{} lacks", id="or-splice"),
    pytest.param('vector(0)) or (vector(1000)', "is not one PromQL", id="balanced-splice-inside-sum"),
    pytest.param('max_over_time(sum(q)[5m:1m])', "q{} lacks", id="subquery"),
    pytest.param('q{namespace="team-a"} offset 1h', "lacks", id="offset"),
    pytest.param('q{namespace="team-a"} @ 100', "lacks", id="at"),
    pytest.param('abs(clamp(sum(rate(x{namespace="team-a"}[1m])), 0, 1))', "x{namespace=", id="nested-functions"),
    pytest.param('absent(q{namespace="team-a"})', "lacks", id="absent"),
    pytest.param('q{namespace="team-b" or a="1"}', 'q{namespace="team-b" or a="1"} lacks', id="or-selector-alternative"),
    pytest.param('q{namespace="team-b"}; kube_secret_info', "is not one PromQL", id="two-expressions-semicolon"),
    pytest.param('q{namespace="team-b"} kube_secret_info', "is not one PromQL", id="two-expressions-side-by-side"),
    pytest.param('q{namespace="team-b"}[5m]', "got matrix", id="matrix-result"),
    pytest.param("1", "got scalar", id="scalar-result"),
    pytest.param('info(q{namespace="team-b"})', "calls info()", id="info-joins-unnamed-series"),
    pytest.param("sum(", "is not one PromQL", id="does-not-parse"),
    pytest.param('q{namespace="team-b\\"}', "is not one PromQL", id="unterminated-string"),
]


@pytest.mark.parametrize(("query", "why"), UNSCOPED)
def test_a_query_that_could_read_another_namespace_is_refused_with_the_offending_part(query: str, why: str) -> None:
    with pytest.raises(UnscopedQuery) as refused:
        scoped_query(query, NS)
    assert why in str(refused.value)


def test_the_namespace_label_is_the_configured_one() -> None:
    assert scoped_query('q{kubernetes_namespace="team-b"}', NS, label="kubernetes_namespace")
    with pytest.raises(UnscopedQuery, match='lacks the matcher kubernetes_namespace="team-b"'):
        scoped_query('q{namespace="team-b"}', NS, label="kubernetes_namespace")


@given(tree=promql_trees())
@settings(max_examples=150, deadline=None)
def test_a_query_is_sent_exactly_when_every_selector_names_its_own_namespace(tree: PromQLTree) -> None:
    """Property: whatever the nesting (functions, aggregations, ranges, offsets, subqueries, set
    and arithmetic joins), a query passes iff each of its selectors carries namespace="team-b"."""
    text, namespaces = tree
    own = all(ns == NS for ns in namespaces)
    try:
        assert scoped_query(text, NS) == text
        passed = True
    except UnscopedQuery:
        passed = False
    assert passed == own, (text, namespaces)
