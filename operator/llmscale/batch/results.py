"""The output file, which is also the checkpoint: one result a line, keyed by ``custom_id``.

Each line is the OpenAI Batch API output format (vLLM's ``BatchRequestOutput`` writes the same)::

    {"id": "batch_req_…", "custom_id": "req-1",
     "response": {"status_code": 200, "request_id": "chatcmpl-…", "body": {…}}, "error": null}

A request that got an HTTP answer has ``response`` (whatever its status: a 400 is a result too, as in
the OpenAI Batch API) and ``error: null``; ``error`` (``{"code", "message"}``, ``response: null``) is
for a request that got no usable answer but will not be retried.

**Exactly once.** :class:`ResultsFile` appends one whole line per result with a single ``write`` and
``fsync``\\ s it before the result counts as done, so a result survives a SIGKILL or a node crash
once it is counted. On open it reads the file back: the ``custom_id`` of every line is done and is
not sent again. A last line without its newline is a write cut short (a crash mid-``write``): it is
cut off, and its request is sent again. Any other line that is not a result stops the run (the file
is not ours, or damaged): nothing is appended to a file that cannot be read back. An exclusive
``flock`` keeps two runs from appending to one file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["OutputError", "ResultsFile", "error_result", "response_result"]


class OutputError(RuntimeError):
    """The output file cannot be used as a checkpoint (unreadable, damaged, or locked)."""


def _result_id() -> str:
    return f"batch_req_{uuid.uuid4().hex}"


def response_result(custom_id: str, status_code: int, request_id: str, body: Any) -> dict[str, Any]:
    """Return the result line of a request that got an HTTP answer (any status)."""
    return {
        "id": _result_id(),
        "custom_id": custom_id,
        "response": {"status_code": status_code, "request_id": request_id, "body": body},
        "error": None,
    }


def error_result(custom_id: str, code: str, message: str) -> dict[str, Any]:
    """Return the result line of a request that got no usable answer and is not retried."""
    return {
        "id": _result_id(),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


@dataclass
class ResultsFile:
    """The output file opened for appending, with the ``custom_id``\\ s already in it.

    Use :meth:`open`; then :meth:`append` each result; :meth:`close` (or ``with``) at the end.

    Attributes:
        path: the file.
        done: ``custom_id`` of every result in the file.
        torn_bytes: bytes of a cut-short last line removed on open (0: none).
        duplicates: results in the file whose ``custom_id`` was already in it (should be 0).
    """

    path: Path
    done: set[str] = field(default_factory=set)
    torn_bytes: int = 0
    duplicates: int = 0
    _fd: int = -1

    @classmethod
    def open(cls, path: Path) -> ResultsFile:
        """Open (or create) ``path``, lock it, repair a torn last line and read the done ids.

        Raises:
            OutputError: the file cannot be opened or locked, or holds a line that is not a result.
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise OutputError(f"{path}: cannot open for appending: {exc.strerror or exc}") from exc
        results = cls(path=path, _fd=fd)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise OutputError(f"{path}: another batch run is writing to it (locked)") from exc
            results._read_back()
            # The file's directory entry must survive a crash too (the file may be new).
            with contextlib.suppress(OSError):
                dir_fd = os.open(path.parent if str(path.parent) else Path("."), os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        except BaseException:
            os.close(fd)
            raise
        return results

    def _read_back(self) -> None:
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size, 0) if size else b""
        end = data.rfind(b"\n") + 1
        if end < len(data):
            # A line without its newline: a write cut short. Cut it off; its request runs again.
            self.torn_bytes = len(data) - end
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
            data = data[:end]
        for number, line in enumerate(data.split(b"\n")[:-1] if data else [], start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise OutputError(
                    f"{self.path}:{number}: not a result line ({exc}); move the file aside or remove the line"
                ) from exc
            custom_id = obj.get("custom_id") if isinstance(obj, dict) else None
            if not isinstance(custom_id, str) or not custom_id:
                raise OutputError(
                    f"{self.path}:{number}: not a result line (no custom_id); move the file aside or remove the line"
                )
            if custom_id in self.done:
                self.duplicates += 1
            self.done.add(custom_id)

    def append(self, result: dict[str, Any]) -> None:
        """Append ``result`` as one line and fsync it; then its ``custom_id`` is done.

        Raises:
            OutputError: the write or fsync failed (disk full, I/O error): the result is not done.
        """
        line = (json.dumps(result, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        try:
            written = os.write(self._fd, line)
            if written != len(line):  # a short write to a regular file: disk full
                raise OSError(f"wrote {written} of {len(line)} bytes")
            os.fsync(self._fd)
        except OSError as exc:
            raise OutputError(f"{self.path}: cannot append a result: {exc}") from exc
        self.done.add(result["custom_id"])

    def close(self) -> None:
        """Release the lock and close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
