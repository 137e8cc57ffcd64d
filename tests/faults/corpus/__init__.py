"""The bad-input corpus: malformed manifests of every kind, each with the outcome a user must get.

``bad_inputs.yaml`` is the data (``generate.py`` writes it; entries may also be added there by hand).
It holds valid ``bases`` (one per kind), ``support`` objects that some entries need (runtimes), and
``entries``: an id, a kind, why the input is bad, a JSON Patch (RFC 6902, as ``kubectl patch
--type=json`` takes it) over the kind's base or a whole ``manifest``, and what must happen:

* ``rejected: <text>``: the API server refuses it, and its message contains the text (a field path);
* ``failed: <text>``: it is accepted, and the job soon has a ``Failed`` condition whose message
  contains the text;
* ``waiting: <text>``: it is accepted and waits for something a user can still create, with a
  condition whose message contains the text.

``needs: <fix>`` marks an entry whose outcome depends on a controller change not made yet; the test
leaves it out of the run and counts it as skipped.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CORPUS = Path(__file__).with_name("bad_inputs.yaml")
OUTCOMES = ("rejected", "failed", "waiting")

Obj = dict[str, Any]


@dataclass(frozen=True)
class Entry:
    id: str
    kind: str
    why: str
    manifest: Obj
    outcome: str  # one of OUTCOMES
    text: str  # what the API server's or the condition's message must contain
    needs: str | None = None


def _tokens(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON pointer starts with '/': {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def apply_patch(document: Obj, operations: list[Obj]) -> Obj:
    """A copy of ``document`` with the RFC 6902 ``add``, ``replace`` and ``remove`` operations applied."""
    result = copy.deepcopy(document)
    for operation in operations:
        *parents, last = _tokens(operation["path"])
        target: Any = result
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        op = operation["op"]
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if op == "add":
                target.insert(index, copy.deepcopy(operation["value"]))
            elif op == "replace":
                target[index] = copy.deepcopy(operation["value"])
            elif op == "remove":
                del target[index]
            else:
                raise ValueError(f"unsupported JSON Patch op {op!r}")
        elif op in ("add", "replace"):
            if op == "replace" and last not in target:
                raise KeyError(f"replace of a missing member: {operation['path']}")
            target[last] = copy.deepcopy(operation["value"])
        elif op == "remove":
            del target[last]
        else:
            raise ValueError(f"unsupported JSON Patch op {op!r}")
    return result


def entries(data: Obj | None = None) -> list[Entry]:
    """Every entry of the corpus, its manifest built and named after its id (unless it sets a name)."""
    data = data if data is not None else yaml.safe_load(CORPUS.read_text())
    found = []
    for raw in data["entries"]:
        if "manifest" in raw:
            manifest = copy.deepcopy(raw["manifest"])
        else:
            base = copy.deepcopy(data["bases"][raw["kind"]])
            base["metadata"]["name"] = raw["id"]
            manifest = apply_patch(base, raw.get("patch") or [])
        (outcome, text), *more = raw["expect"].items()
        if more or outcome not in OUTCOMES:
            raise ValueError(f"{raw['id']}: expect must be one of {OUTCOMES}, got {raw['expect']}")
        found.append(
            Entry(raw["id"], raw["kind"], raw["why"], manifest, outcome, str(text), raw.get("needs"))
        )
    return found


def support(data: Obj | None = None) -> list[Obj]:
    """The objects entries rely on (runtimes), to create before the entries."""
    data = data if data is not None else yaml.safe_load(CORPUS.read_text())
    return [copy.deepcopy(obj) for obj in data.get("support") or []]
