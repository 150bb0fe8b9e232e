"""HTTP authentication and TLS of the Prometheus reader, built on ``requests``.

Turns :class:`~llmscale.signals.config.PrometheusAuth` into what prometheus-api-client takes: a
``requests.Session`` (``verify`` for the CA bundle, ``cert`` for mutual TLS), an ``auth`` object
and extra headers. Secret files are read when a request is sent and re-read whenever they change
(inode, size or modification time), because Kubernetes rotates a projected ServiceAccount token
by swapping a symlink in place.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import requests
from requests.auth import AuthBase, HTTPBasicAuth

from llmscale.signals.config import PrometheusAuth

__all__ = ["CredentialsUnreadable", "FileSecret", "build_http"]


class CredentialsUnreadable(Exception):
    """A secret file (bearer token, password) could not be read; the message names it."""


class FileSecret:
    """The stripped content of a file, read again whenever the file changes.

    Args:
        path: the file.
        what: what it holds, for error messages (``bearer token``).

    Thread-safe: one reader may send requests from several threads.
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._value = ""

    def get(self) -> str:
        """Return the file's content without surrounding whitespace.

        Raises:
            CredentialsUnreadable: the file is missing, unreadable or empty.
        """
        try:
            st = os.stat(self.path)  # follows the symlink a projected volume swaps
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            with self._lock:
                if stamp != self._stamp:
                    self._value = self.path.read_text().strip()
                    self._stamp = stamp
                value = self._value
        except OSError as exc:
            raise CredentialsUnreadable(
                f"{self.what} file {self.path} is unreadable: {exc.strerror or exc}"
            ) from exc
        if not value:
            raise CredentialsUnreadable(f"{self.what} file {self.path} is empty")
        return value


class _Bearer(AuthBase):
    """``Authorization: Bearer <token>`` with the token given or read from a file."""

    def __init__(self, token: str | None, file: FileSecret | None) -> None:
        self._token = token
        self._file = file

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        token = self._file.get() if self._file is not None else self._token
        request.headers["Authorization"] = f"Bearer {token}"
        return request


class _Basic(AuthBase):
    """HTTP basic auth with the password given or read from a file."""

    def __init__(self, username: str, password: str | None, file: FileSecret | None) -> None:
        self._username = username
        self._password = password
        self._file = file

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        password = self._file.get() if self._file is not None else (self._password or "")
        return HTTPBasicAuth(self._username, password)(request)


def build_http(
    settings: PrometheusAuth, session: requests.Session | None = None
) -> tuple[requests.Session, AuthBase | None, dict[str, str]]:
    """Return ``(session, auth, headers)`` for prometheus-api-client from the auth settings.

    Args:
        settings: the authentication and TLS settings.
        session: a session to configure (proxies set by the caller stay); a new one when ``None``.

    Returns:
        The session with ``verify`` (CA bundle path, or ``False`` with ``insecure_skip_verify``)
        and ``cert`` set, the ``auth`` to send on every request (``None`` without credentials),
        and the extra headers.
    """
    session = session or requests.Session()
    if settings.insecure_skip_verify:
        session.verify = False
    elif settings.ca_file is not None:
        session.verify = str(settings.ca_file)
    if settings.cert_file is not None:
        session.cert = (
            (str(settings.cert_file), str(settings.key_file))
            if settings.key_file
            else str(settings.cert_file)
        )
    auth: AuthBase | None = None
    if settings.bearer_token_file is not None:
        auth = _Bearer(None, FileSecret(settings.bearer_token_file, "bearer token"))
    elif settings.bearer_token is not None:
        auth = _Bearer(settings.bearer_token.get_secret_value(), None)
    elif settings.username is not None:
        file = FileSecret(settings.password_file, "password") if settings.password_file else None
        password = settings.password.get_secret_value() if settings.password else None
        auth = _Basic(settings.username, password, file)
    return session, auth, dict(settings.headers)
