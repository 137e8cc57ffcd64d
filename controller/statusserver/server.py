"""The HTTPS endpoint training pods POST their progress to, and the write it makes on their job.

One route, Kubeflow Trainer's: ``POST <job's API path>/status`` with ``{"trainerStatus": {...}}``
and a projected ServiceAccount token as the bearer. Each report is authenticated with a
TokenReview (audience: the path) and authorised against the pod the token is bound to
(``authz``); an allowed verdict is remembered for ``VERDICT_TTL`` seconds per token and path, so
a job reporting every 5 s costs the API server one write per report, not three requests.

The write: a TrainJob's ``status.trainerStatus`` (merge patch of the status subresource, the
fields a report leaves out removed); a v1 job's annotations (the whole report as JSON, and its
percentage and ETA for ``kubectl get``), because an upstream v1 CRD has no such status field and
would drop one. A report never touches conditions or the reconcilers' fields.
"""

from __future__ import annotations

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
from kubetrain.controller.statusserver.authz import Target, Verdict, authorise, bound_pod, target_of
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient
from kubetrain.kube.resources import PODS, TOKEN_REVIEWS

if TYPE_CHECKING:
    from kubetrain.controller.statusserver.tls import ServingCert

log = logging.getLogger("kubetrain.controller.statusserver")
Obj = dict[str, Any]
VERDICT_TTL = 60.0  # seconds an allowed (token, path) is trusted without asking again
MAX_VERDICTS = 4096
MAX_BODY = 256 * 1024
FIELDS = ("progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime")


def parse_report(body: Any) -> Obj:
    """The ``trainerStatus`` of a report body, validated against the CRD's limits (ValueError if not)."""
    if not isinstance(body, dict) or not isinstance(body.get("trainerStatus"), dict):
        raise ValueError('the body must be {"trainerStatus": {...}}')
    try:
        status = TrainerStatus.model_validate(body["trainerStatus"]).to_dict()
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"trainerStatus.{field}: {first['msg']}") from None
    if not status.get("lastUpdatedTime"):
        status["lastUpdatedTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {key: status[key] for key in FIELDS if key in status}


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
        self.clock = clock
        self._allowed: dict[tuple[str, str], float] = {}

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
        try:
            status = parse_report(await request.json())
        except ValueError as exc:  # json.JSONDecodeError is one
            return _answer(Verdict(400, str(exc)))
        try:
            verdict = await self.verdict(token.strip(), target)
            if verdict.allowed:
                body, subresource = job_patch(target, status)
                await self.kube.patch(
                    target.kind.resource,
                    target.name,
                    body,
                    namespace=target.namespace,
                    subresource=subresource,
                )
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
        """Whether ``token`` may report for ``target``: TokenReview, then the pod it is bound to."""
        key, now = (token, target.path), self.clock()
        if self._allowed.get(key, 0.0) > now:
            return Verdict(200, "ok")
        review = await self.kube.create(
            TOKEN_REVIEWS,
            {
                "apiVersion": TOKEN_REVIEWS.api_version,
                "kind": TOKEN_REVIEWS.kind,
                "spec": {"token": token, "audiences": [target.path]},
            },
        )
        bound = bound_pod(review, target)
        if isinstance(bound, Verdict):
            return bound
        name, uid = bound
        verdict = authorise(target, uid, await self.kube.get(PODS, name, target.namespace))
        if verdict.allowed:
            if len(self._allowed) >= MAX_VERDICTS:
                self._allowed = {k: t for k, t in self._allowed.items() if t > now}
            self._allowed[key] = now + VERDICT_TTL
        return verdict


def _answer(verdict: Verdict) -> web.Response:
    return web.json_response({"status": verdict.status, "message": verdict.reason}, status=verdict.status)
