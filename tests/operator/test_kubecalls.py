"""Requests through the official client's ApiClient without its generated API classes (issue 26:
CoreV1Api, AppsV1Api and BatchV1Api held 25 MB): what reaches a real HTTP server, the answers,
the errors, the pages."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from llmscale.controller.kubecalls import APPLY, PAGE, pages, request


class _Server(ThreadingHTTPServer):
    seen: list[dict[str, Any]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        length = int(self.headers.get("Content-Length") or 0)
        self.server.seen.append({"method": self.command, "path": url.path, "query": query,
                                 "content_type": self.headers.get("Content-Type"),
                                 "authorization": self.headers.get("Authorization"),
                                 "body": json.loads(self.rfile.read(length)) if length else None})
        if url.path.endswith("/empty"):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if url.path.endswith("/missing"):
            status, answer = 404, {"kind": "Status", "reason": "NotFound", "message": "missing not found", "code": 404}
        elif url.path == "/api/v1/pods":  # three pages of two
            page = int(query.get("continue", "0"))
            answer = {"items": [{"n": 2 * page}, {"n": 2 * page + 1}],
                      "metadata": {"continue": str(page + 1)} if page < 2 else {}}
            status = 200
        else:
            status, answer = 200, {"kind": "Deployment", "metadata": {"name": "x"}}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PATCH = do_DELETE = _answer

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def served() -> Iterator[tuple[kubernetes.client.ApiClient, list[dict[str, Any]]]]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = kubernetes.client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    config.api_key = {"authorization": "t0k3n"}
    config.api_key_prefix = {"authorization": "Bearer"}
    client = kubernetes.client.ApiClient(config)
    try:
        yield client, server.seen
    finally:
        client.close()  # type: ignore[no-untyped-call]
        server.shutdown()
        server.server_close()


def test_an_apply_sends_what_the_generated_method_sent(served: tuple[kubernetes.client.ApiClient, list[Any]]) -> None:
    client, seen = served
    answer = request(client, "PATCH", "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
                     path_params={"namespace": "team a", "name": "chat"},
                     query=[("fieldManager", "llmscale"), ("force", True)], body={"kind": "Deployment"},
                     content_type=APPLY)
    assert answer == {"kind": "Deployment", "metadata": {"name": "x"}}
    assert seen == [{"method": "PATCH", "path": "/apis/apps/v1/namespaces/team%20a/deployments/chat",
                     "query": {"fieldManager": "llmscale", "force": "true"}, "content_type": APPLY,
                     "authorization": "Bearer t0k3n", "body": {"kind": "Deployment"}}]


def test_a_refusal_is_the_clients_api_exception_with_its_status(
        served: tuple[kubernetes.client.ApiClient, list[Any]]) -> None:
    client, _ = served
    with pytest.raises(ApiException) as refused:
        request(client, "DELETE", "/api/v1/namespaces/{namespace}/services/{name}",
                path_params={"namespace": "a", "name": "missing"})
    assert refused.value.status == 404 and "missing not found" in str(refused.value.body)


def test_an_empty_answer_is_none(served: tuple[kubernetes.client.ApiClient, list[Any]]) -> None:
    assert request(served[0], "DELETE", "/api/v1/namespaces/a/services/empty") is None


def test_pages_follow_the_continue_token(served: tuple[kubernetes.client.ApiClient, list[Any]]) -> None:
    client, seen = served
    assert [item["n"] for item in pages(client, "/api/v1/pods", query=[("fieldSelector", "spec.nodeName!=")])] == [
        0, 1, 2, 3, 4, 5]
    assert [s["query"] for s in seen] == [
        {"fieldSelector": "spec.nodeName!=", "limit": str(PAGE)},
        {"fieldSelector": "spec.nodeName!=", "limit": str(PAGE), "continue": "1"},
        {"fieldSelector": "spec.nodeName!=", "limit": str(PAGE), "continue": "2"},
    ]


def test_the_operator_never_builds_the_generated_api_classes() -> None:
    # The point of the module, in a process of its own (other tests build them): the writer, the
    # scale client and the GPU reader built as `llmscale run` builds them load none of the three.
    code = """
import sys, kubernetes.client
from llmscale.commands import run
from llmscale.controller.gpusfree import GpuReader
from llmscale.controller.scaletarget import KubernetesScaleClient
from llmscale.controller.writer import KubernetesWriter
api = kubernetes.client.ApiClient(kubernetes.client.Configuration(host="http://127.0.0.1:9"))
KubernetesWriter(api), KubernetesScaleClient(api), GpuReader(api)
print(sorted(m for m in sys.modules if m.startswith("kubernetes.client.api.")))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert not {"kubernetes.client.api.core_v1_api", "kubernetes.client.api.apps_v1_api",
                "kubernetes.client.api.batch_v1_api"} & set(loaded), loaded
