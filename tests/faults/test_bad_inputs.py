"""Bad input never hangs: every manifest of the corpus is refused by the API server with a message naming
the field, or accepted and then failed by the controller with a message naming the cause.

The corpus (``tests/faults/corpus/bad_inputs.yaml``) holds hundreds of malformed manifests of every kind
the controller serves. All of them are submitted at once into one namespace with the controller running,
and each must end as its entry says, within ``SETTLE_SECONDS``; an accepted entry left running or pending
without a condition that says why fails the test. Entries marked ``needs: <fix>`` wait for a controller
change: they are left out of the run and counted as skipped. The figures (per kind: rejected, failed
with a message, waiting with a reason, skipped) are printed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.faults.corpus import Entry, entries, support
from tests.support import ControllerHandle, Jobs

pytestmark = pytest.mark.usefixtures("crds")

SETTLE_SECONDS = 60.0  # how long an accepted entry may take to fail (or to say what it waits for)
CONCURRENCY = 24
CLUSTER_SCOPED = {"ClusterTrainingRuntime"}
FINISHED = {"Failed", "Succeeded", "Complete"}

CORPUS = entries()
RUNNABLE = [e for e in CORPUS if e.needs is None]
WAITING_ON_A_FIX = [e for e in CORPUS if e.needs is not None]

Obj = dict[str, Any]


_V2_KINDS = {"TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"}


def resource(kind: str) -> tuple[str, str, str]:
    group, version = ("trainer.kubeflow.org", "v1alpha1") if kind in _V2_KINDS else ("kubeflow.org", "v1")
    return group, version, kind.lower() + "s"


@dataclass
class Submitted:
    entry: Entry
    name: str
    status: int | None = None  # the API server's error status; None when it accepted the object
    message: str = ""

    @property
    def accepted(self) -> bool:
        return self.status is None


def _message(exc: client.ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message", exc.body))
    except (TypeError, ValueError):
        return str(exc.body)


async def submit(custom: client.CustomObjectsApi, namespace: str, entry: Entry) -> Submitted:
    body = entry.manifest
    name = str((body.get("metadata") or {}).get("name", ""))
    if entry.kind in CLUSTER_SCOPED and name == entry.id:
        name = f"{entry.id}-{namespace}"  # cluster-wide names: one per test run
        body = {**body, "metadata": {**body["metadata"], "name": name}}
    group, version, plural = resource(entry.kind)
    try:
        if entry.kind in CLUSTER_SCOPED:
            await custom.create_cluster_custom_object(group, version, plural, body)
        else:
            await custom.create_namespaced_custom_object(group, version, namespace, plural, body)
    except client.ApiException as exc:
        return Submitted(entry, name, exc.status, _message(exc))
    return Submitted(entry, name)


def admission_problem(done: Submitted) -> str | None:
    """What is wrong with how the API server answered, for an entry it must reject."""
    expected = done.entry.text
    if done.accepted:
        return f"accepted; expected a rejection naming {expected!r}"
    if done.status != 422:
        return f"refused with status {done.status} (expected 422 Invalid): {done.message}"
    if expected not in done.message:
        return f"rejected, but the message does not name {expected!r}: {done.message}"
    return None


def conditions(obj: Obj | None) -> list[Obj]:
    return list(((obj or {}).get("status") or {}).get("conditions") or [])


def verdict(entry: Entry, obj: Obj | None) -> tuple[bool, str | None]:
    """(settled, problem) for an accepted entry, from the job as the API server has it now."""
    found = conditions(obj)
    finished = [c for c in found if c.get("type") in FINISHED and c.get("status") == "True"]
    if entry.outcome == "failed":
        return _failed_verdict(entry, finished)
    if finished:
        return True, f"{finished[0]['type']}: {finished[0].get('message')}; expected to wait, saying why"
    if any(entry.text in str(c.get("message", "")) for c in found):
        return True, None
    return False, None


def _failed_verdict(entry: Entry, finished: list[Obj]) -> tuple[bool, str | None]:
    """``verdict`` for an entry that must fail, naming ``entry.text``, given its finished conditions."""
    failed = next((c for c in finished if c["type"] == "Failed"), None)
    if failed is None:
        return (True, f"{finished[0]['type']} instead of Failed") if finished else (False, None)
    message = str(failed.get("message", ""))
    if entry.text in message:
        return True, None
    return True, f"Failed, but the message does not name {entry.text!r}: {message}"


async def settle(
    custom: client.CustomObjectsApi, namespace: str, accepted: list[Submitted]
) -> dict[str, str]:
    """Wait until every accepted entry has the outcome it should; return the problems by entry id."""
    pending = {(d.entry.kind, d.name): d for d in accepted}
    problems: dict[str, str] = {}
    last: dict[tuple[str, str], Obj] = {}
    deadline = time.monotonic() + SETTLE_SECONDS
    while pending and time.monotonic() < deadline:
        for kind in sorted({kind for kind, _ in pending}):
            listed = await custom.list_namespaced_custom_object(
                *resource(kind)[:2], namespace, resource(kind)[2]
            )
            for obj in listed["items"]:
                key = (kind, obj["metadata"]["name"])
                if key not in pending:
                    continue
                last[key] = obj
                settled, problem = verdict(pending[key].entry, obj)
                if settled:
                    if problem:
                        problems[pending[key].entry.id] = problem
                    del pending[key]
        if pending:
            await asyncio.sleep(0.5)
    for key, done in pending.items():
        shown = [(c.get("type"), c.get("status"), c.get("message")) for c in conditions(last.get(key))]
        problems[done.entry.id] = (
            f"after {SETTLE_SECONDS:.0f}s not {done.entry.outcome} naming {done.entry.text!r}; conditions: {shown}"
        )
    return problems


def figures(results: list[Submitted], problems: dict[str, str]) -> str:
    """The table for docs/reliability.md: per kind, how each bad input ended."""
    counts: Counter[tuple[str, str]] = Counter()
    for done in results:
        ended = "problem" if done.entry.id in problems else done.entry.outcome
        counts[done.entry.kind, ended] += 1
    for entry in WAITING_ON_A_FIX:
        counts[entry.kind, "skipped"] += 1
    kinds = sorted({kind for kind, _ in counts})
    columns = ("rejected", "failed", "waiting", "skipped", "problem")
    lines = [
        "bad-input corpus: rejected at admission / failed with a message / waiting with a reason / "
        "skipped (needs a controller fix) / problems",
        f"{'kind':<24}" + "".join(f"{c:>10}" for c in columns),
    ]
    for kind in [*kinds, "total"]:
        row = [
            sum(v for (k, c), v in counts.items() if c == column and kind in ("total", k))
            for column in columns
        ]
        lines.append(f"{kind:<24}" + "".join(f"{n:>10}" for n in row))
    return "\n".join(lines)


async def run_corpus(
    custom: client.CustomObjectsApi, namespace: str, corpus: list[Entry]
) -> tuple[list[Submitted], dict[str, str]]:
    """Submit every entry at once (bounded concurrency), then wait for the accepted ones to settle."""
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(entry: Entry) -> Submitted:
        async with limit:
            return await submit(custom, namespace, entry)

    results = await asyncio.gather(*(one(e) for e in corpus))
    problems: dict[str, str] = {}
    accepted_as_expected: list[Submitted] = []
    try:
        for done in results:
            if done.entry.outcome == "rejected":
                problem = admission_problem(done)
                if problem:
                    problems[done.entry.id] = problem
            elif not done.accepted:
                problems[done.entry.id] = f"rejected ({done.status}): {done.message}"
            else:
                accepted_as_expected.append(done)
        problems.update(await settle(custom, namespace, accepted_as_expected))
    finally:
        for done in results:  # cluster-scoped objects outlive the namespace
            if done.accepted and done.entry.kind in CLUSTER_SCOPED:
                await custom.delete_cluster_custom_object(*resource(done.entry.kind), done.name)
    return results, problems


async def create_support(jobs: Jobs) -> None:
    for obj in support():
        await jobs.create(obj)


async def test_every_bad_input_is_rejected_or_fails_with_a_message(
    controller: ControllerHandle,
    jobs: Jobs,
    custom: client.CustomObjectsApi,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    await create_support(jobs)
    results, problems = await run_corpus(custom, namespace, RUNNABLE)
    with capsys.disabled():
        print(
            f"\n{figures(results, problems)}\n({time.monotonic() - started:.0f}s for {len(results)} entries)"
        )
    why = {done.entry.id: done.entry.why for done in results}
    listed = "\n".join(f"  {key} ({why[key]}): {problem}" for key, problem in sorted(problems.items()))
    assert not problems, f"{len(problems)} bad inputs did not end as their corpus entry says:\n{listed}"


def test_the_corpus_covers_every_kind_and_every_outcome() -> None:
    kinds = Counter(e.kind for e in CORPUS)
    assert len(CORPUS) >= 300
    assert set(kinds) == {
        "PyTorchJob",
        "TFJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "TrainJob",
        "TrainingRuntime",
        "ClusterTrainingRuntime",
    }
    assert {e.outcome for e in CORPUS} == {"rejected", "failed", "waiting"}
    assert len({e.id for e in CORPUS}) == len(CORPUS)
