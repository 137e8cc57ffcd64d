"""A small error hierarchy that mirrors HTTP semantics, so callers catch what they mean."""

from __future__ import annotations

import json
from typing import Any


class APIError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, body: Any, *, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body
        self.method = method
        self.path = path
        self.retry_after: float | None = None
        super().__init__(f"{method} {path}: {status} {self.message}")

    @property
    def message(self) -> str:
        if isinstance(self.body, dict):
            return str(self.body.get("message") or self.body.get("reason") or "")
        return str(self.body)[:500]

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""


class APINotFoundError(APIError):
    pass


class APIConflictError(APIError):
    """409: AlreadyExists on create, or a stale resourceVersion on update."""

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


class APIGoneError(APIError):
    """410: the resource version is too old (a watch must re-list)."""


class APIInvalidError(APIError):
    """422: the object failed validation."""


class APITooManyRequestsError(APIError):
    pass


class APIServerError(APIError):
    """5xx: worth retrying."""


def for_status(status: int, raw: bytes, *, method: str, path: str) -> APIError:
    try:
        body: Any = json.loads(raw)
    except ValueError:
        body = raw.decode(errors="replace")
    cls: type[APIError] = {
        404: APINotFoundError,
        409: APIConflictError,
        410: APIGoneError,
        422: APIInvalidError,
        429: APITooManyRequestsError,
    }.get(status, APIServerError if status >= 500 else APIError)
    return cls(status, body, method=method, path=path)
