"""JSON merge patches (RFC 7386) computed from two versions of an object.

The controller edits a copy of a job's status and sends only the difference.
A merge patch cannot express "remove this key" except as ``null``, so keys
that disappeared are sent as ``None``; lists are replaced whole, as the RFC says.
"""

from __future__ import annotations

from typing import Any


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``old`` into ``new``."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = value
    return patch
