"""What the fault proxy does to which request: actions, rules, and the choice between them.

Kept apart from the proxy's sockets so the decision is a plain function of the rules, the request
and a seeded ``random.Random``, testable without a server, and repeatable: the same rules, seed and
request order fire the same faults. ``faultproxy`` re-exports all of it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import yaml

# The reasons a kube-apiserver gives for these codes, so injected answers read like real ones.
_STATUS_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# -- actions -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Respond:
    """Answer with ``status`` and a Kubernetes ``Status`` body; the API server never sees the request."""

    status: int
    reason: str | None = None
    message: str = "injected by the fault proxy"
    retry_after: int | None = None

    def describe(self) -> str:
        return f"respond {self.status}"


@dataclass(frozen=True)
class Drop:
    """Close the client's connection without answering."""

    def describe(self) -> str:
        return "drop"


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds``, then forward."""

    seconds: float

    def describe(self) -> str:
        return f"delay {self.seconds:g}s"


@dataclass(frozen=True)
class Hang:
    """Hold the request unanswered for ``seconds`` (None: until ``release()`` or ``stop()``), then forward."""

    seconds: float | None = None

    def describe(self) -> str:
        return "hang" if self.seconds is None else f"hang {self.seconds:g}s"


@dataclass(frozen=True)
class Cut:
    """Forward, and close the client's connection ``after`` seconds if the response is still streaming."""

    after: float

    def describe(self) -> str:
        return f"cut after {self.after:g}s"


@dataclass(frozen=True)
class LoseResponse:
    """Forward (the API server acts on it), then drop the connection or answer ``status`` instead."""

    status: int | None = None

    def describe(self) -> str:
        return "lose_response" if self.status is None else f"lose_response {self.status}"


Action = Respond | Drop | Delay | Hang | Cut | LoseResponse


def respond(
    status: int, *, reason: str | None = None, message: str | None = None, retry_after: int | None = None
) -> Respond:
    """Answer ``status`` (reason defaults to the API server's for that code); ``retry_after`` adds the
    ``Retry-After`` header and ``details.retryAfterSeconds``, as the API server does when it throttles."""
    if not 100 <= status <= 599:
        raise ValueError(f"status {status} is not an HTTP status code")
    if retry_after is not None and retry_after < 0:
        raise ValueError("retry_after must not be negative")
    return Respond(status, reason, message or "injected by the fault proxy", retry_after)


def drop() -> Drop:
    """Close the connection without an answer: the client sees the server hang up.

    aiohttp (and so kubernetes_asyncio) resends an idempotent request (GET, PUT, DELETE, HEAD) once
    when the server hangs up before answering, so a client only sees a dropped GET if the rule fires
    at least twice in a row."""
    return Drop()


def delay(seconds: float) -> Delay:
    """Wait ``seconds`` before forwarding (the API server sees the request late)."""
    if seconds < 0:
        raise ValueError("seconds must not be negative")
    return Delay(seconds)


def hang(seconds: float | None = None) -> Hang:
    """Hold the request without answering for ``seconds`` (None: until ``release()`` or ``stop()``)."""
    if seconds is not None and seconds < 0:
        raise ValueError("seconds must not be negative")
    return Hang(seconds)


def cut(after: float) -> Cut:
    """Forward; abort the client's connection ``after`` seconds into a response still streaming."""
    if after < 0:
        raise ValueError("after must not be negative")
    return Cut(after)


def lose_response(status: int | None = None) -> LoseResponse:
    """Forward and let the API server act on it, then drop the connection (``status=None``) or answer
    ``status`` instead of the real answer: the write happened, the client cannot know."""
    if status is not None and not 100 <= status <= 599:
        raise ValueError(f"status {status} is not an HTTP status code")
    return LoseResponse(status)


# -- matching ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """What rules see of a request."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    client: str | None = None

    @property
    def watch(self) -> bool:
        """A watch: ``?watch=true`` (or 1), or the old ``/watch/`` paths."""
        return self.query.get("watch", "").lower() in ("true", "1") or "/watch/" in self.path


@dataclass(eq=False)
class Rule:
    """Which requests to fault, how, and how often. Every filter left at None matches anything.

    ``path`` is a regular expression searched in the URL path (without the client prefix); ``body``
    a substring of the request body. ``skip`` lets the first N matching requests through untouched,
    ``times`` caps how often the rule fires, ``probability`` fires it at random (from the proxy's
    seeded random). ``matched`` counts the requests that passed its filters while it could still
    fire, ``fired`` those it decided."""

    action: Action
    _: KW_ONLY
    method: str | None = None
    path: str | None = None
    body: str | None = None
    watch: bool | None = None
    times: int | None = None
    skip: int = 0
    probability: float = 1.0
    client: str | None = None
    fired: int = field(default=0, init=False)
    matched: int = field(default=0, init=False)
    _pattern: re.Pattern[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.times is not None and self.times < 0:
            raise ValueError("times must not be negative")
        if self.skip < 0:
            raise ValueError("skip must not be negative")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("probability must be between 0 and 1")
        if self.method is not None:
            self.method = self.method.upper()
        self._pattern = re.compile(self.path) if self.path is not None else None

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.fired >= self.times

    def matches(self, call: Call) -> bool:
        """Whether the request passes every filter (counters and chance are not considered)."""
        return (
            (self.method is None or call.method.upper() == self.method)
            and (self._pattern is None or self._pattern.search(call.path) is not None)
            and (self.body is None or self.body.encode() in call.body)
            and (self.watch is None or call.watch == self.watch)
            and (self.client is None or call.client == self.client)
        )


def choose(rules: Iterable[Rule], call: Call, chance: random.Random) -> Rule | None:
    """The first rule that matches ``call`` and fires; updates that rule's counters.

    A rule that matches but does not fire (exhausted, still skipping, or unlucky) lets the later
    rules decide. ``chance`` is drawn from only for rules with a probability below 1, so adding a
    certain rule does not shift the random choices of the others."""
    for rule in rules:
        if rule.exhausted or not rule.matches(call):
            continue
        rule.matched += 1
        if rule.matched <= rule.skip:
            continue
        if rule.probability < 1.0 and chance.random() >= rule.probability:
            continue
        rule.fired += 1
        return rule
    return None


def status_body(status: int, *, reason: str | None, message: str, retry_after: int | None) -> dict[str, Any]:
    """A ``Status`` object as the API server writes it for a failed request."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else _STATUS_REASONS.get(status, ""),
        "code": status,
    }
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return body


# -- rules from a file -------------------------------------------------------------------------------
_ACTIONS: dict[str, tuple[Any, frozenset[str]]] = {
    "respond": (respond, frozenset({"status", "reason", "message", "retry_after"})),
    "drop": (drop, frozenset()),
    "delay": (delay, frozenset({"seconds"})),
    "hang": (hang, frozenset({"seconds"})),
    "cut": (cut, frozenset({"after"})),
    "lose_response": (lose_response, frozenset({"status"})),
}
_RULE_KEYS = frozenset({"method", "path", "body", "watch", "times", "skip", "probability", "client"})


def rules_from_config(entries: object) -> list[Rule]:
    """Rules from a list of mappings (a rules file as parsed), each ``action: <name>`` with the
    action's arguments and the rule's filters as keys, e.g.
    ``{action: respond, status: 409, method: PATCH, path: /status$, times: 1}``."""
    if not isinstance(entries, list):
        raise ValueError("the rules must be a list")
    rules = []
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, Mapping) or "action" not in entry:
            raise ValueError(f"rule {number}: a mapping with an `action` key is expected")
        name = entry["action"]
        if name not in _ACTIONS:
            raise ValueError(f"rule {number}: unknown action {name!r} (one of {', '.join(_ACTIONS)})")
        make, arguments = _ACTIONS[name]
        unknown = set(entry) - arguments - _RULE_KEYS - {"action"}
        if unknown:
            raise ValueError(f"rule {number}: unknown keys {sorted(unknown)} for action {name}")
        try:
            action = make(**{k: v for k, v in entry.items() if k in arguments})
            rules.append(Rule(action, **{k: v for k, v in entry.items() if k in _RULE_KEYS}))
        except (TypeError, ValueError, re.error) as exc:
            raise ValueError(f"rule {number}: {exc}") from exc
    return rules


def load_rules(path: Path) -> list[Rule]:
    """Rules from a YAML file holding a list (see ``rules_from_config``)."""
    return rules_from_config(yaml.safe_load(path.read_text()) or [])
