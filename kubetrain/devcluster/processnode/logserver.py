"""The kubelet's log endpoint, so ``kubectl logs`` works through the API server.

The API server forwards ``kubectl logs`` (and every client's ``read_namespaced_pod_log``)
to ``https://<node>:<port>/containerLogs/<namespace>/<pod>/<container>`` with
the query parameters ``follow``, ``tailLines``, ``previous``, ``timestamps``,
``limitBytes`` and ``sinceSeconds``, authenticating with a client certificate
from the cluster CA. This serves them from the container log files.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from typing import TYPE_CHECKING

from aiohttp import web

from kubetrain.devcluster.processnode.containers import format_line, read_log

if TYPE_CHECKING:
    from kubetrain.devcluster.processnode.agent import Agent
    from kubetrain.devcluster.processnode.pods import ContainerState, PodWorker


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes", "")


def _find(agent: Agent, namespace: str, name: str) -> PodWorker | None:
    return next((w for w in agent.workers.values() if w.namespace == namespace and w.name == name), None)


async def container_logs(request: web.Request) -> web.StreamResponse:
    agent: Agent = request.app["agent"]
    if not request.transport or not request.transport.get_extra_info("peercert"):
        raise web.HTTPUnauthorized(text="a client certificate from the cluster CA is required")
    namespace, pod_name, container_name = (request.match_info[k] for k in ("namespace", "pod", "container"))
    worker = _find(agent, namespace, pod_name)
    if worker is None:
        raise web.HTTPNotFound(text=f"pod {namespace}/{pod_name} is not running on this node")
    state = worker.container(container_name)
    if state is None:
        raise web.HTTPNotFound(text=f"container {container_name!r} is not in pod {pod_name}")
    query = request.query
    previous = _truthy(query.get("previous")) if "previous" in query else False
    runs = state.runs[:-1] if previous else state.runs
    if not runs:
        what = "a previous terminated" if previous else "a started"
        raise web.HTTPBadRequest(
            text=f"container {container_name!r} in pod {pod_name!r} has no {what} instance"
        )
    run = runs[-1]
    timestamps = _truthy(query.get("timestamps")) if "timestamps" in query else False
    tail = int(query["tailLines"]) if "tailLines" in query else None
    since = float(query["sinceSeconds"]) if "sinceSeconds" in query else None
    limit = int(query["limitBytes"]) if "limitBytes" in query else None
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    await response.prepare(request)
    sent = 0

    async def send(line: str) -> bool:
        nonlocal sent
        data = (line + "\n").encode()
        if limit is not None and sent + len(data) > limit:
            data = data[: max(0, limit - sent)]
        if data:
            await response.write(data)
            sent += len(data)
        return limit is None or sent < limit

    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=since) if since else None
    raw = read_log(run.log_path, timestamps=True, tail=tail)
    for stamped in raw:
        if (
            cutoff is not None
            and dt.datetime.fromisoformat(stamped.split(" ", 1)[0].replace("Z", "+00:00")) < cutoff
        ):
            continue
        if not await send(stamped if timestamps else stamped.split(" ", 1)[1] if " " in stamped else ""):
            return response
    if _truthy(query.get("follow")) if "follow" in query else False:
        await _follow(
            run.log_path,
            len(run.log_path.read_bytes()) if run.log_path.exists() else 0,
            state,
            run_index=len(state.runs) - 1 if not previous else len(runs) - 1,
            timestamps=timestamps,
            send=send,
        )
    await response.write_eof()
    return response


async def _follow(
    path,
    offset: int,
    state: ContainerState,
    *,
    run_index: int,
    timestamps: bool,  # type: ignore[no-untyped-def]
    send,
) -> None:
    """Send lines as they are written, until that run of the container has ended and the log is drained."""
    buffer = b""
    while True:
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
        except OSError:
            chunk = b""
        offset += len(chunk)
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if not await send(format_line(line.decode(errors="replace"), timestamps=timestamps)):
                return
        run = state.runs[run_index]
        if not chunk and run.exit_code is not None:
            return
        await asyncio.sleep(0.2)


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def unsupported(_: web.Request) -> web.Response:
    return web.Response(
        status=501, text="the process node supports logs only (no exec, attach or port-forward)"
    )


async def serve(agent: Agent, context: ssl.SSLContext) -> web.AppRunner:
    app = web.Application()
    app["agent"] = agent
    app.add_routes(
        [
            web.get("/healthz", healthz),
            web.get("/containerLogs/{namespace}/{pod}/{container}", container_logs),
            web.route("*", "/{tail:.*}", unsupported),
        ]
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", agent.settings.port, ssl_context=context).start()
    return runner
