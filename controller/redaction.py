"""Secrets out of what a failed container said, before it reaches the job's status.

The last lines of a failed container's log (its termination message) go into ``status.firstFailure``,
the Failed condition's message and an Event, and from there into Airflow XComs and KFP outputs: places
anyone who may read the job can read, without the ``pods/log`` permission the log itself needs. A
training script that fails while printing its configuration prints its credentials with it. So the
obvious forms of a secret are replaced before the text is kept: the password of a URL, a bearer token,
the value of a key named like a secret (``password``, ``token``, ``secret``, ``api_key``,
``access_key``...), JSON Web Tokens, AWS access key ids and PEM private keys. It is a net for the
obvious, not a guarantee: a job whose logs may hold anything else turns the tail off
(``kubetrain.dev/failure-log-tail: "false"``, docs/job-lifecycle.md).
"""

from __future__ import annotations

import re

MASK = "***"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys, whole
    (
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S),
        "[private key redacted]",
    ),
    # user:password@ in a URL
    (re.compile(r"(?P<keep>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?=@)"), rf"\g<keep>{MASK}"),
    # Authorization: Bearer xyz / Basic xyz
    (re.compile(r"(?P<keep>\b(?:[Bb]earer|[Bb]asic)\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\g<keep>{MASK}"),
    # JSON Web Tokens
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"), MASK),
    # AWS access key ids
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    # key=value, key: value, "key": "value" for a key whose name ends like a secret's
    (
        re.compile(
            r"(?P<keep>(?i:[\w.-]*?(?:password|passwd|pwd|secret|token|credentials?|"
            r"(?:api|access|secret|private)[_-]?key))(?![\w])[\"']?\s*[:=]\s*[\"']?)"
            r"(?P<value>[^\s\"',;}]+)"
        ),
        rf"\g<keep>{MASK}",
    ),
)


def redact(text: str) -> str:
    """``text`` with the obvious forms of a secret replaced by ``***``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
