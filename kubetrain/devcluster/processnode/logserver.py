"""The kubelet's log endpoint, so ``kubectl logs`` works through the API server.

The API server forwards ``kubectl logs`` (and every client's ``read_namespaced_pod_log``)
to ``https://<node>:<port>/containerLogs/<namespace>/<pod>/<container>`` with
the query parameters ``follow``, ``tailLines``, ``previous``, ``timestamps``,
``limitBytes`` and ``sinceSeconds``, authenticating with a client certificate
from the cluster CA. This serves them from the container log files, reading of the node only
``NodePods``: the pods it runs, those bound to it, and where their files are.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from kubetrain.devcluster.processnode.containers import Run, earlier_runs, format_line, log_dir, read_log
from kubetrain.devcluster.processnode.pods import PodWorker


@dataclass(frozen=True)
class NodePods:
    """What the log endpoint reads of its node."""

    workers: Mapping[str, PodWorker]  # the pods it runs now, by uid
    bound: Callable[[str], dict[str, Any] | None]  # a pod bound to it, by "<namespace>/<name>"
    pods_dir: Path  # each pod's files are in <pods_dir>/<uid>


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() in ("1", "true", "yes", "")


@dataclass(frozen=True)
class LogQuery:
    """What ``kubectl logs`` asked for."""

    follow: bool
    previous: bool
    timestamps: bool
    tail: int | None
    since: float | None
    limit: int | None

    @classmethod
    def parse(cls, request: web.Request) -> LogQuery:
        query = request.query

        def number(name: str) -> int | None:
            return int(query[name]) if name in query else None

        return cls(
            follow=_flag(request, "follow") if "follow" in query else False,
            previous=_flag(request, "previous") if "previous" in query else False,
            timestamps=_flag(request, "timestamps") if "timestamps" in query else False,
            tail=number("tailLines"),
            since=float(query["sinceSeconds"]) if "sinceSeconds" in query else None,
            limit=number("limitBytes"),
        )


def _select_run(request: web.Request, query: LogQuery) -> Run:
    node: NodePods = request.app["node"]
    namespace, name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
    worker = next((w for w in node.workers.values() if w.namespace == namespace and w.name == name), None)
    if worker is not None:
        state = worker.container(container)
        if state is None:
            raise web.HTTPNotFound(text=f"container {container!r} is not in pod {name}")
        runs = state.runs
    else:
        runs = _finished_runs(node, namespace, name, container)
    runs = runs[:-1] if query.previous else runs
    if not runs:
        what = "previous terminated" if query.previous else "started"
        raise web.HTTPBadRequest(text=f"container {container!r} in pod {name!r} has no {what} instance")
    return runs[-1]


def _finished_runs(node: NodePods, namespace: str, name: str, container: str) -> list[Run]:
    """The runs of a container of a pod bound here that no worker holds: one that had finished when
    the node last started (its logs stay on disk, as a kubelet keeps an exited container's)."""
    pod = node.bound(f"{namespace}/{name}")
    if pod is None:
        raise web.HTTPNotFound(text=f"pod {namespace}/{name} is not on this node")
    spec = pod.get("spec") or {}
    if container not in [
        c["name"] for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    ]:
        raise web.HTTPNotFound(text=f"container {container!r} is not in pod {name}")
    return earlier_runs(log_dir(node.pods_dir / pod["metadata"]["uid"], container))


async def container_logs(request: web.Request) -> web.StreamResponse:
    if request.transport is None or not request.transport.get_extra_info("peercert"):
        raise web.HTTPUnauthorized(text="a client certificate from the cluster CA is required")
    query = LogQuery.parse(request)
    run = _select_run(request, query)
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    await response.prepare(request)
    sent = 0

    async def send(line: str) -> bool:
        """Write one line; False once limitBytes is reached."""
        nonlocal sent
        data = (line + "\n").encode()
        if query.limit is not None:
            data = data[: max(0, query.limit - sent)]
        await response.write(data)
        sent += len(data)
        return query.limit is None or sent < query.limit

    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=query.since) if query.since else None
    for stamped in read_log(run.log_path, timestamps=True, tail=query.tail):
        stamp, _, text = stamped.partition(" ")
        if cutoff is not None and dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) < cutoff:
            continue
        if not await send(stamped if query.timestamps else text):
            return response
    if query.follow:
        await _follow(run, send, timestamps=query.timestamps)
    await response.write_eof()
    return response


async def _follow(run: Run, send: Callable[[str], Awaitable[bool]], *, timestamps: bool) -> None:
    """Send lines as they are written, until the run has ended and its log is drained."""
    offset = run.log_path.stat().st_size if run.log_path.exists() else 0
    pending = b""
    while True:
        with run.log_path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
        offset += len(chunk)
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if not await send(format_line(line.decode(errors="replace"), timestamps=timestamps)):
                return
        if not chunk and run.exit_code is not None:
            return
        await asyncio.sleep(0.2)


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def unsupported(_: web.Request) -> web.Response:
    return web.Response(
        status=501, text="the process node supports logs only (no exec, attach or port-forward)"
    )


async def serve(node: NodePods, port: int, context: ssl.SSLContext) -> web.AppRunner:
    app = web.Application()
    app["node"] = node
    app.add_routes(
        [
            web.get("/healthz", healthz),
            web.get("/containerLogs/{namespace}/{pod}/{container}", container_logs),
            web.route("*", "/{tail:.*}", unsupported),
        ]
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    return runner
