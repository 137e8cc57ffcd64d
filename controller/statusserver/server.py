"""The HTTPS endpoint training pods POST their progress to, and the write it makes on their job.

One route, Kubeflow Trainer's: ``POST <job's API path>/status`` with ``{"trainerStatus": {...}}``
and a projected ServiceAccount token as the bearer. Each report is authenticated first, before its
body is read: the token verified against the cluster's signing keys (``tokens``; a TokenReview,
audience: the path, where the keys are not served), then the pod the token is bound to and the job
that pod must belong to, by uid (``authz``). An allowed verdict is remembered for ``admission.VERDICT_TTL``
seconds per token and path while the token's pod lives (the pod informers tell the server of each
deletion), so a job reporting every 5 s costs the API server one write per report, not four
requests; a refusal is remembered too, and what a client may cost is budgeted
(``admission``: 429 past it). The server's API calls have a rate budget of their own, so reports
never queue the controller's own writes.

The write: a TrainJob's ``status.trainerStatus`` (merge patch of the status subresource, the
fields a report leaves out removed); a v1 job's annotations (the whole report as JSON, and its
percentage and ETA for ``kubectl get``), because an upstream v1 CRD has no such status field and
would drop one. A report never touches conditions or the reconcilers' fields.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pydantic
from aiohttp import web

from kubetrain import naming
from kubetrain.api.kinds import TRAINJOB
from kubetrain.api.v2 import TrainerStatus
from kubetrain.controller.statusserver import admission, tokens
from kubetrain.controller.statusserver.authz import Target, Verdict, authorise, bound_pod, target_of
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import PODS, TOKEN_REVIEWS

if TYPE_CHECKING:
    from kubetrain.controller.statusserver.tls import ServingCert

log = logging.getLogger("kubetrain.controller.statusserver")
Obj = dict[str, Any]
MAX_BODY = 32 * 1024  # a full report (256 metrics of 64-character names and values) is about 40 KB less
MAX_REPORT = 16 * 1024  # what one report may store on its job (a v1 job keeps it in an annotation)
MAX_ETA = 2**31 - 1  # seconds: the API server's int32 limit, about 68 years
CLOCK_SKEW = 300  # seconds a report's lastUpdatedTime may be ahead of the controller's clock
FIELDS = ("progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime")


def parse_report(raw: bytes, now: float | None = None) -> Obj:
    """The ``trainerStatus`` of a report body, validated against the CRD's limits and kept small
    (ValueError naming the field if not)."""
    fields = _trainer_status(raw)
    try:
        status = TrainerStatus.model_validate(fields).to_dict()
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"trainerStatus.{field}: {first['msg']}") from None
    if int(status.get("estimatedRemainingSeconds") or 0) > MAX_ETA:
        raise ValueError(f"trainerStatus.estimatedRemainingSeconds: at most {MAX_ETA}")
    now = time.time() if now is None else now
    if status.get("lastUpdatedTime"):
        _check_time(str(status["lastUpdatedTime"]), now)
    else:
        status["lastUpdatedTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    if len(json.dumps(status, separators=(",", ":"))) > MAX_REPORT:
        raise ValueError(f"the report is larger than {MAX_REPORT} bytes; send fewer or shorter metrics")
    return {key: status[key] for key in FIELDS if key in status}


def _trainer_status(raw: bytes) -> Obj:
    """The body's ``trainerStatus``, which must be all it holds, with report fields only."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ValueError("the body is nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
    if (
        not isinstance(body, dict)
        or set(body) != {"trainerStatus"}
        or not isinstance(body["trainerStatus"], dict)
    ):
        raise ValueError('the body must be {"trainerStatus": {...}} and nothing else')
    fields: Obj = body["trainerStatus"]
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValueError(f"trainerStatus.{unknown[0]} is not a field; a report has {', '.join(FIELDS)}")
    return fields


def _check_time(stamp: str, now: float) -> None:
    try:
        when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            "trainerStatus.lastUpdatedTime: an RFC 3339 time, e.g. 2026-01-01T12:00:00Z"
        ) from None
    if when.tzinfo is None or when.timestamp() > now + CLOCK_SKEW:
        raise ValueError("trainerStatus.lastUpdatedTime: a time with its zone, not in the future")


def job_patch(target: Target, status: Obj) -> tuple[Obj, str | None]:
    """The merge patch (and subresource) that records ``status`` on the target job."""
    if target.kind is TRAINJOB:
        return {"status": {"trainerStatus": {key: status.get(key) for key in FIELDS}}}, "status"
    percent, eta = status.get("progressPercentage"), status.get("estimatedRemainingSeconds")
    annotations = {
        naming.ANNOTATION_TRAINER_STATUS: json.dumps(status, separators=(",", ":")),
        naming.ANNOTATION_PROGRESS: None if percent is None else str(percent),
        naming.ANNOTATION_ETA: None if eta is None else str(eta),
    }
    return {"metadata": {"annotations": annotations}}, None


class StatusServer:
    """Serves reports over HTTPS with ``cert`` and writes them through ``kube``."""

    def __init__(self, kube: KubeClient, cert: ServingCert, *, clock: Callable[[], float] = time.monotonic):
        self.kube = kube
        self.cert = cert
        self._keys = tokens.IssuerKeys(kube, clock)
        self._verdicts = admission.Verdicts(clock)
        self._reviews = admission.Limiter(admission.REVIEWS_QPS, admission.REVIEWS_BURST, clock)
        self._reports = admission.Limiter(admission.REPORTS_QPS, admission.REPORTS_BURST, clock)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.add_routes([web.post("/{path:.*}", self.handle)])
        return app

    async def start(self, host: str, port: int) -> web.AppRunner:
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port, ssl_context=self.cert.server_context()).start()
        return runner

    async def handle(self, request: web.Request) -> web.Response:
        target = target_of(request.path)
        if target is None:
            return _answer(Verdict(404, f"no job kind at {request.path}"))
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _answer(Verdict(401, "a bearer token is required"))
        token = token.strip()
        try:
            verdict = await self.verdict(token, target)
            if verdict.allowed:
                wait = self._reports.take(token)
                if wait is not None:
                    return _answer(Verdict(429, "reporting too often; send the next report later"), wait)
                try:
                    status = parse_report(await request.read())
                except ValueError as exc:
                    return _answer(Verdict(400, str(exc)))
                body, subresource = job_patch(target, status)
                await self.kube.patch(
                    target.kind.resource,
                    target.name,
                    body,
                    namespace=target.namespace,
                    subresource=subresource,
                )
        except ReviewBudgetSpentError as busy:
            return _answer(Verdict(429, "too many unknown tokens at once; try again later"), busy.wait)
        except errors.APINotFoundError:
            verdict = Verdict(404, f"{target.kind.kind} {target.namespace}/{target.name} not found")
        except errors.APIError as exc:
            log.warning("progress report for %s/%s: %s", target.namespace, target.name, exc)
            verdict = Verdict(503, "the API server did not take the report; send it again later")
        if not verdict.allowed:
            log.info(
                "progress report for %s %s/%s refused: %s",
                target.kind.kind,
                target.namespace,
                target.name,
                verdict.reason,
            )
        return _answer(verdict)

    async def verdict(self, token: str, target: Target) -> Verdict:
        """Whether ``token`` may report for ``target``: the token verified here against the cluster's
        keys (``tokens``), else by a TokenReview; then the pod it is bound to and the job. Raises
        ``ReviewBudgetSpentError`` when a TokenReview is needed and the server's budget is spent."""
        key = (token, target.path)
        known = self._verdicts.get(key)
        if known is not None:
            return Verdict(*known)
        review = await self._keys.review(token, target.path)
        if review is None:
            wait = self._reviews.take()
            if wait is not None:
                raise ReviewBudgetSpentError(wait)
            review = await self._token_review(token, target)
        verdict, pod_uid = await self._judge(review, target)
        ttl = admission.VERDICT_TTL if verdict.allowed else admission.REFUSAL_TTL
        self._verdicts.remember(key, verdict.status, verdict.reason, ttl=ttl, pod_uid=pod_uid)
        return verdict

    def pod_changed(self, old: Obj | None, new: Obj | None) -> None:
        """A pod informer's handler: a deleted pod's tokens are no longer trusted from memory."""
        if new is None and old is not None:
            self._verdicts.forget_pod(str(old["metadata"].get("uid")))

    async def _token_review(self, token: str, target: Target) -> Obj:
        review: Obj = await self.kube.create(
            TOKEN_REVIEWS,
            {
                "apiVersion": TOKEN_REVIEWS.api_version,
                "kind": TOKEN_REVIEWS.kind,
                "spec": {"token": token, "audiences": [target.path]},
            },
        )
        return review

    async def _judge(self, review: Obj, target: Target) -> tuple[Verdict, str | None]:
        """The verdict on a reviewed token for ``target``, and the uid of the pod it is bound to, if any."""
        bound = bound_pod(review, target)
        if isinstance(bound, Verdict):
            return bound, None
        name, uid = bound
        pod = await self.kube.get(PODS, name, target.namespace)
        job = await self.kube.get(target.kind.resource, target.name, target.namespace)
        if job is None:
            raise errors.APINotFoundError(404, f"{target.kind.kind} {target.namespace}/{target.name}")
        return authorise(target, uid, pod, job_uid=job["metadata"]["uid"]), uid


class ReviewBudgetSpentError(Exception):
    """The server's TokenReview budget is spent for ``wait`` seconds."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"busy for {wait:.1f}s")
        self.wait = wait


def _answer(verdict: Verdict, wait: float | None = None) -> web.Response:
    headers = {"Retry-After": admission.retry_after(wait)} if wait is not None else None
    return web.json_response(
        {"status": verdict.status, "message": verdict.reason}, status=verdict.status, headers=headers
    )
