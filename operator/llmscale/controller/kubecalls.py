"""Requests to the API server through the official client's ``ApiClient``, answered as JSON, without
its generated API classes.

kubernetes-client 37 defines every method of ``CoreV1Api``, ``AppsV1Api`` and ``BatchV1Api`` with
pydantic ``validate_call`` and annotated fields, built when the class is first touched: 25 MB of
resident memory for the three (issue 26) for the ten calls the operator makes, whose answers it
deserialised into models and turned back into JSON. :func:`request` makes the calls those methods make — ``param_serialize``,
``call_api``, ``response_deserialize`` — with the same credentials, TLS, timeouts and errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import kubernetes.client

__all__ = ["APPLY", "MERGE_PATCH", "PAGE", "pages", "request"]

#: Content type of a server-side apply (the body is JSON, which is YAML).
APPLY = "application/apply-patch+yaml"
#: Content type of a JSON merge patch (RFC 7386).
MERGE_PATCH = "application/merge-patch+json"
#: Items per page of a paginated list.
PAGE = 500


def request(
    api_client: kubernetes.client.ApiClient,
    method: str,
    path: str,
    *,
    path_params: Mapping[str, str] | None = None,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str | None = None,
    timeout: float | tuple[float, float] | None = None,
) -> Any:
    """One request, its JSON answer parsed.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        method: ``GET``, ``PATCH``, ``DELETE``, ...
        path: the API path, ``{name}`` placeholders filled (quoted) from ``path_params``:
            ``/apis/apps/v1/namespaces/{namespace}/deployments/{name}``.
        query: query parameters, in order (booleans are sent as ``true``/``false``).
        body: the request body (a JSON-serialisable mapping), or ``None``.
        content_type: the body's content type (:data:`APPLY`, :data:`MERGE_PATCH`; JSON if ``None``).
        timeout: seconds for the whole request, or (connect, read); ``None``: the client's default.

    Returns:
        The answer's JSON (a dict for an object or a list), ``None`` for an empty answer.

    Raises:
        kubernetes.client.exceptions.ApiException: the API server answered outside 2xx (``status``
            says which; 0 for a TLS failure).
        urllib3.exceptions.HTTPError: no answer (a refused connection, a timeout), as the
            generated methods raised it.
    """
    headers = {"Accept": "application/json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    params = api_client.param_serialize(  # type: ignore[no-untyped-call]
        method=method, resource_path=path, path_params=dict(path_params or {}), query_params=list(query),
        header_params=headers, body=body, auth_settings=["BearerToken"])
    response = api_client.call_api(*params, _request_timeout=timeout)  # type: ignore[no-untyped-call]
    response.read()  # type: ignore[no-untyped-call]
    answer = api_client.response_deserialize(response, {"2XX": "object"}).data  # type: ignore[no-untyped-call]
    return None if answer == "" else answer


def pages(api_client: kubernetes.client.ApiClient, path: str, *, path_params: Mapping[str, str] | None = None,
          query: Sequence[tuple[str, Any]] = (), timeout: float | tuple[float, float] | None = None,
          ) -> Iterator[dict[str, Any]]:
    """Every item of a list at ``path`` (arguments as :func:`request`'s), :data:`PAGE` items a
    request, one page parsed at a time (the ``continue`` token).

    Raises:
        kubernetes.client.exceptions.ApiException: a page was refused or failed.
    """
    token: str | None = None
    while True:
        paging = [("limit", PAGE)] + ([("continue", token)] if token else [])
        page = request(api_client, "GET", path, path_params=path_params, query=[*query, *paging],
                       timeout=timeout) or {}
        yield from page.get("items") or ()
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            return
