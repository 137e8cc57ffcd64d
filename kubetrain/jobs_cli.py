"""``kubetrain submit|get|list|describe|logs|wait|delete|suspend|resume``: training jobs from a terminal.

Every kind (the v1 jobs and TrainJob) through one set of commands, against
whatever cluster the kubeconfig points at. A job is named ``NAME`` (its kind is
found in the namespace) or ``KIND/NAME`` (``pytorchjob/mnist``, ``tj/llm``).

Exit codes, so scripts can branch on them (docs/reference/cli.md):

====  ===========================================================
0     done; for ``wait`` and ``submit --wait``: the job succeeded
1     the job failed
2     bad usage or a bad manifest (the message names the field)
3     no such job
4     ``--timeout`` passed before the job finished
5     the cluster could not be reached or refused the request
====  ===========================================================
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import aiohttp
import typer
import yaml
from kubernetes_asyncio.client import ApiException
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from kubetrain import naming
from kubetrain.client import JobClient, attempt, kinds, lineage
from kubetrain.client.errors import InvalidJobError, JobError, JobNotFoundError, LineageError
from kubetrain.plot import Curve, render
from kubetrain.tabular import Grid, show

Obj = dict[str, Any]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_TIMEOUT, EXIT_API = 0, 1, 2, 3, 4, 5
OUTPUTS = ("table", "wide", "name", "json", "yaml")

# soft_wrap: a line longer than the console is printed whole (a pipe is 80 columns to rich), never
# broken or cut; a terminal wraps it as it does kubectl's.
console = Console(soft_wrap=True)
errors = Console(stderr=True, soft_wrap=True)

Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")
]
Kubeconfig = Annotated[
    str | None, typer.Option(help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")
]
Context = Annotated[str | None, typer.Option(help="Kubeconfig context.")]
Output = Annotated[
    str,
    typer.Option(
        "--output", "-o", help="table, wide (more columns), name (KIND.GROUP/NAME, as kubectl), json or yaml."
    ),
]
JobRef = Annotated[str, typer.Argument(help="NAME or KIND/NAME, e.g. mnist or pytorchjob/mnist.")]
Timeout = Annotated[float | None, typer.Option(help="Seconds to wait at most (default: no limit).")]


def fail(message: str, code: int) -> NoReturn:
    errors.print(f"[red]error:[/red] {escape(message)}", highlight=False)  # log lines hold [brackets]
    raise typer.Exit(code)


@contextmanager
def connect(kubeconfig: str | None, context: str | None) -> Iterator[JobClient]:
    """A client, with the errors every command handles the same way turned into exit codes."""
    try:
        client = JobClient.connect(kubeconfig=kubeconfig, context=context)
    except Exception as exc:
        fail(f"cannot load the kubeconfig: {exc}", EXIT_API)
    try:
        yield client
    except typer.Exit:
        raise
    except JobNotFoundError as exc:
        fail(str(exc), EXIT_NOT_FOUND)
    except InvalidJobError as exc:
        fail(str(exc), EXIT_USAGE)
    except TimeoutError as exc:
        fail(str(exc) or "timed out", EXIT_TIMEOUT)
    except JobError as exc:
        fail(str(exc), EXIT_FAILED)
    except ApiException as exc:
        fail(f"the API server refused the request: {exc.status} {exc.reason}", EXIT_API)
    except (OSError, RuntimeError, aiohttp.ClientError) as exc:
        fail(f"the cluster did not answer: {exc}", EXIT_API)
    finally:
        client.close()


def default_namespace(kubeconfig: str | None, context: str | None, namespace: str | None) -> str:
    """``--namespace``, else the kubeconfig context's namespace, else ``default`` (as kubectl does)."""
    if namespace:
        return namespace
    path = Path(
        kubeconfig or os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]
    ).expanduser()
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "default"
    wanted = context or config.get("current-context")
    for entry in config.get("contexts") or []:
        if entry.get("name") == wanted:
            return str((entry.get("context") or {}).get("namespace") or "default")
    return "default"


def resolve(client: JobClient, ref: str, namespace: str) -> Obj:
    """The job ``ref`` names: ``KIND/NAME``, or ``NAME`` searched among every kind."""
    if "/" in ref:
        kind_name, name = ref.split("/", 1)
        try:
            kind = kinds.kind_of(kind_name)
        except ValueError as exc:
            fail(str(exc), EXIT_USAGE)
        return client.require(kind.kind, name, namespace)
    found = [j for j in client.list(namespace=namespace) if j["metadata"]["name"] == ref]
    if not found:
        fail(f"no training job named {ref!r} in namespace {namespace}", EXIT_NOT_FOUND)
    if len(found) > 1:
        options = ", ".join(f"{j['kind'].lower()}/{ref}" for j in found)
        fail(f"{ref!r} names more than one job in {namespace}; say which: {options}", EXIT_USAGE)
    return found[0]


@contextmanager
def connect_to_job(
    ref: str, namespace: str | None, kubeconfig: str | None, context: str | None
) -> Iterator[tuple[JobClient, str, Obj]]:
    """What a command on one job starts with: a client (as ``connect``), the namespace (as
    ``default_namespace``) and the job ``ref`` names there (as ``resolve``)."""
    ns = default_namespace(kubeconfig, context, namespace)
    with connect(kubeconfig, context) as client:
        yield client, ns, resolve(client, ref, ns)


def on_one_job(action: Callable[[JobClient, str, Obj], None]) -> Callable[..., None]:
    """The command that does ``action`` (given the client, the namespace and the job) to the job its
    argument names, with ``action``'s name and docstring as its own, and no options but where to look."""

    def command(
        job: JobRef,
        namespace: Namespace = None,
        kubeconfig: Kubeconfig = None,
        context: Context = None,
    ) -> None:
        with connect_to_job(job, namespace, kubeconfig, context) as (client, ns, found):
            action(client, ns, found)

    # Not functools.wraps: typer would follow __wrapped__ to the action's parameters.
    command.__name__, command.__doc__ = action.__name__, action.__doc__
    return command


def named(job: Obj) -> str:
    """``KIND NAMESPACE/NAME``, as messages name a job."""
    return f"{job['kind']} {job['metadata']['namespace']}/{job['metadata']['name']}"


def check_output(output: str) -> None:
    if output not in OUTPUTS:
        fail(f"--output must be one of {', '.join(OUTPUTS)} (got {output!r})", EXIT_USAGE)


def emit(data: Any, jobs: list[Obj], output: str, *, namespaces: bool = False) -> None:
    """Print ``data`` (json, yaml) or ``jobs`` (a table, names) as ``--output`` says; a table names the
    namespace of each job with ``namespaces``."""
    if output == "json":
        console.print_json(json.dumps(data, default=str))
    elif output == "yaml":
        console.print(yaml.safe_dump(data, sort_keys=False), end="", highlight=False, markup=False)
    elif output == "name":
        for job in jobs:
            print(resource_name(job))
    else:
        show(console, jobs_table(jobs, namespaces=namespaces, wide=output == "wide"))


def resource_name(job: Obj) -> str:
    """``pytorchjob.kubeflow.org/mnist``: the job as ``kubectl get -o name`` names it (and as ``kubectl``
    and this command accept it back)."""
    kind = kinds.kind_of(job["kind"])
    return f"{kind.kind.lower()}.{kind.group}/{job['metadata']['name']}"


def age(job: Obj) -> str:
    created = job["metadata"].get("creationTimestamp")
    if not created:
        return "-"
    seconds = int(
        (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()
    )
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


STATE_STYLE = {
    "Succeeded": "green",
    "Failed": "red",
    "Running": "cyan",
    "Restarting": "yellow",
    "Suspended": "magenta",
}


def progress_bar(percent: int | None, width: int = 10) -> str:
    """``[#####-----]  50%``: the reported percentage as a bar (``-`` before any report)."""
    if percent is None:
        return "-"
    filled = round(width * max(0, min(100, int(percent))) / 100)
    return f"[{'#' * filled}{'-' * (width - filled)}] {int(percent):3d}%"


def jobs_table(jobs: list[Obj], *, namespaces: bool, wide: bool = False) -> Grid:
    """The jobs, a row each; ``wide`` adds the restarts and what the training last reported (step,
    metrics)."""
    grid = Grid(
        (
            *(["NAMESPACE"] if namespaces else []),
            "KIND",
            "NAME",
            "STATE",
            "REPLICAS",
            "PROGRESS",
            "ETA",
            "LAST CHECKPOINT",
            "AGE",
            *(["RESTARTS", "REPORTED"] if wide else []),
        )
    )
    for job in jobs:
        state = kinds.state(job)
        replicas = ",".join(  # one field, so awk counts columns as the header does
            f"{r}:{c.get('active', 0)}/{c.get('succeeded', 0)}/{c.get('failed', 0)}"
            for r, c in kinds.replica_counts(job).items()
        )
        checkpoint = (job["metadata"].get("annotations") or {}).get(naming.ANNOTATION_LAST_CHECKPOINT, "")
        reported = kinds.trainer_status(job)
        eta = reported.get("estimatedRemainingSeconds")
        grid.add_row(
            *([job["metadata"]["namespace"]] if namespaces else []),
            job["kind"],
            job["metadata"]["name"],
            Text(state, style=STATE_STYLE.get(state, "")),
            replicas or "-",
            progress_bar(reported.get("progressPercentage")),
            "-" if eta is None else kinds.duration(eta),
            checkpoint or "-",
            age(job),
            *([str(kinds.restarts(job)), kinds.progress_line(job) or "-"] if wide else []),
        )
    return grid


def wait_with_progress(client: JobClient, job: Obj, timeout: float | None) -> Obj:
    """Watch the job until it finishes, showing a live status line (plain lines when not a terminal)."""
    kind, name, namespace = job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]
    started = time.monotonic()
    changes = attempt.follow(client, kind, name, namespace, last_seen=job, timeout=timeout)
    last: attempt.Seen | None = None
    if console.is_terminal:
        with console.status(kinds.status_line(job)) as status:
            for last in changes:
                if last.event in SHOWN:
                    elapsed = time.monotonic() - started
                    status.update(f"{kinds.status_line(last.job)} [dim]({elapsed:.0f}s)[/]")
    else:
        printed = ""
        for last in changes:
            if last.event in SHOWN and (line := kinds.status_line(last.job)) != printed:
                console.print(line, highlight=False)
                printed = line
    if last is None or not last.finished:
        latest = job if last is None else last.job
        fail(
            f"{kind} {namespace}/{name} did not finish within {timeout:g}s: {kinds.status_line(latest)}",
            EXIT_TIMEOUT,
        )
    return last.job


SHOWN = (attempt.Event.CHANGED, attempt.Event.FINISHED)  # what the status line follows: the job's changes


def finish(client: JobClient, job: Obj) -> NoReturn:
    """Print the outcome of a finished job and exit with its code."""
    result = attempt.finish(client, job)  # a failed job raises JobFailedError: its reason and log tail
    if result.state == "Succeeded":
        metrics = ", ".join(f"{k}={v}" for k, v in sorted(result.metrics.items()))
        console.print(
            f"[green]{result.kind} {result.name} succeeded[/]" + (f": {metrics}" if metrics else "")
        )
        raise typer.Exit(EXIT_OK)
    raise typer.Exit(EXIT_FAILED)


# -- commands ---------------------------------------------------------------------------------------
def submit(
    file: Annotated[
        Path, typer.Argument(help="A YAML or JSON file of jobs and what they need ('-': stdin).")
    ],
    namespace: Namespace = None,
    wait: Annotated[bool, typer.Option(help="Wait for the job(s) to finish; exit with the outcome.")] = False,
    timeout: Timeout = None,
    dry_run: Annotated[bool, typer.Option(help="Let the API server validate only.")] = False,
    output: Output = "table",
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Create the training jobs in FILE, after the objects they need that FILE holds too (claims,
    ConfigMaps, runtimes...), which are created unless they exist."""
    check_output(output)
    text = sys.stdin.read() if str(file) == "-" else _read(file)
    try:
        documents = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        fail(f"{file} is not valid YAML: {exc}", EXIT_USAGE)
    for document in documents:
        if not isinstance(document, dict) or not document.get("kind") or not document.get("apiVersion"):
            fail(f"{file}: every document needs apiVersion and kind (got {document!r:.80})", EXIT_USAGE)
    jobs = [d for d in documents if d["kind"] in kinds.KINDS]
    if not jobs:
        fail(f"{file} holds no training job (kinds: {', '.join(kinds.KINDS)})", EXIT_USAGE)
    ns = default_namespace(kubeconfig, context, namespace)
    with connect(kubeconfig, context) as client:
        for other in (d for d in documents if d["kind"] not in kinds.KINDS):
            outcome = client.create_supporting(
                other, namespace=_namespace_of(other, namespace, ns), dry_run=dry_run
            )
            errors.print(f"{other['kind'].lower()}/{other['metadata'].get('name')} {outcome}")
        created = [client.create(d, namespace=_namespace_of(d, namespace, ns), dry_run=dry_run) for d in jobs]
        emit(created, created, output)
        if wait and not dry_run:
            finals = [wait_with_progress(client, job, timeout) for job in created]
            failed = [j for j in finals if kinds.state(j) != "Succeeded"]
            finish(client, failed[0] if failed else finals[-1])


def list_jobs(
    namespace: Namespace = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")] = False,
    kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
    output: Output = "table",
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """List training jobs of every kind (v1 jobs and TrainJobs)."""
    check_output(output)
    ns = None if all_namespaces else default_namespace(kubeconfig, context, namespace)
    with connect(kubeconfig, context) as client:
        jobs = sorted(
            client.list(kind=kind, namespace=ns),
            key=lambda j: (j["metadata"]["namespace"], j["kind"], j["metadata"]["name"]),
        )
        emit(jobs, jobs, output, namespaces=all_namespaces)


def top(
    namespace: Namespace = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.", min=0.5)] = 2.0,
    once: Annotated[bool, typer.Option(help="Print one frame and exit (also when not a terminal).")] = False,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """A live view of the jobs that have not finished: state, replicas, progress, ETA and what the
    training last reported, refreshed every --interval seconds until Ctrl-C."""
    ns = None if all_namespaces else default_namespace(kubeconfig, context, namespace)
    with connect(kubeconfig, context) as client:

        def frame() -> Grid:
            jobs = sorted(
                (j for j in client.list(namespace=ns) if not kinds.is_finished(j)),
                key=lambda j: (j["metadata"]["namespace"], j["kind"], j["metadata"]["name"]),
            )
            states = Counter(kinds.state(j) for j in jobs)
            grid = jobs_table(jobs, namespaces=all_namespaces, wide=True)
            summary = (
                ", ".join(f"{count} {state.lower()}" for state, count in sorted(states.items())) or "none"
            )
            grid.title = f"{ns or 'all namespaces'}: {summary} (at {dt.datetime.now():%H:%M:%S})"
            return grid

        if once or not console.is_terminal:
            show(console, frame())
            return
        # A live view is redrawn in place, so it keeps to the terminal: a cell too long for it is folded
        # onto a second line, never cut.
        with (
            Live(frame().rich(), console=console, auto_refresh=False) as live,
            contextlib.suppress(KeyboardInterrupt),
        ):
            while True:
                time.sleep(interval)
                live.update(frame().rich(), refresh=True)


def get(
    job: JobRef,
    namespace: Namespace = None,
    output: Output = "table",
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Show one job."""
    check_output(output)
    with connect_to_job(job, namespace, kubeconfig, context) as (_, _, found):
        emit(found, [found], output)


@on_one_job
def describe(client: JobClient, _: str, job: Obj) -> None:
    """Conditions, replicas, pods, the training report and the events of a job."""
    _describe(client, job)


def logs(
    job: JobRef,
    namespace: Namespace = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream until the job ends.")] = False,
    role: Annotated[
        str | None, typer.Option(help="Replica type (Master, Worker...) or replicated job (node).")
    ] = None,
    index: Annotated[int, typer.Option(help="Replica index (completion index for a TrainJob).")] = 0,
    tail: Annotated[int | None, typer.Option(help="Only the last N lines.")] = None,
    previous: Annotated[bool, typer.Option(help="The previous run of a restarted container.")] = False,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Print the logs of rank 0, or of --role/--index."""
    with connect_to_job(job, namespace, kubeconfig, context) as (client, _, found):
        if follow:
            for line in client.follow_logs(found, role=role, index=index):
                print(line, flush=True)
        else:
            print(client.logs(found, role=role, index=index, tail=tail, previous=previous), end="")


def wait(
    job: JobRef,
    namespace: Namespace = None,
    timeout: Timeout = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Wait for a job to finish; exit 0 when it succeeded, 1 when it failed, 4 on timeout."""
    with connect_to_job(job, namespace, kubeconfig, context) as (client, _, found):
        finish(client, wait_with_progress(client, found, timeout))


@on_one_job
def delete(client: JobClient, namespace: str, job: Obj) -> None:
    """Delete a job and its pods."""
    client.delete(job["kind"], job["metadata"]["name"], namespace)
    console.print(f"deleted {named(job)}")


@on_one_job
def suspend(client: JobClient, namespace: str, job: Obj) -> None:
    """Suspend a running job: its pods are deleted, checkpoints stay."""
    if kinds.is_finished(job):
        fail(f"{named(job)} already finished ({kinds.state(job)})", EXIT_USAGE)
    client.set_suspended(job["kind"], job["metadata"]["name"], namespace, True)
    console.print(f"suspended {named(job)}")


def resume(
    job: JobRef,
    namespace: Namespace = None,
    wait: Annotated[bool, typer.Option(help="Wait for it to finish; exit with the outcome.")] = False,
    timeout: Timeout = None,
    pod_wait: Annotated[
        float,
        typer.Option(help="Seconds to wait for a failed attempt's pods to end before resubmitting."),
    ] = lineage.POD_WAIT_SECONDS,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Resume a suspended job, or resubmit a failed one as its lineage's next attempt (same
    checkpoint dir), once the failed attempt's pods are gone."""
    with connect_to_job(job, namespace, kubeconfig, context) as (client, _, found):
        try:
            prepared = attempt.prepare(
                client,
                lineage.resume_request(found),
                log=lambda line: errors.print(line, highlight=False, markup=False),
                pod_wait=pod_wait,
                include=[found],
            )
        except LineageError as exc:
            fail(str(exc), EXIT_TIMEOUT if exc.action == "wait" else EXIT_USAGE)
        resumed, decision = prepared.job, prepared.decision
        if decision.action is lineage.Action.RESUME:
            console.print(f"resumed {named(resumed)}")
        else:
            console.print(
                f"submitted {named(resumed)} (attempt {decision.number}), resuming from "
                f"{decision.last_checkpoint or 'the latest checkpoint'}"
            )
        if wait:
            finish(client, wait_with_progress(client, resumed, timeout))


def plot(
    job: JobRef,
    namespace: Namespace = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric", "-m", help="A metric to plot (repeat for more); default: every one with a curve."
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="The PNG to write (default: <lineage>-curves.png).")
    ] = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Write a PNG of the metric curves of every attempt of a job's lineage, from rank 0's logs."""
    with connect_to_job(job, namespace, kubeconfig, context) as (client, ns, found):
        name, curves = client.curves(found)
        try:
            png = render(
                curves,
                output or Path(f"{name}-curves.png"),
                metrics=metric,
                title=f"{found['kind']} {ns}/{name}",
            )
        except (ValueError, RuntimeError) as exc:
            fail(f"{exc}{_logs_gone(curves)}", EXIT_USAGE)
        console.print(f"wrote {png}: {', '.join(c.attempt for c in curves)}{_logs_gone(curves)}")


def _logs_gone(curves: list[Curve]) -> str:
    """Which attempts left no log to plot: a failed attempt's running pods are deleted with their logs."""
    gone = [c.attempt for c in curves if not c.points]
    return f" (no log left of {', '.join(gone)}: a deleted pod takes its log with it)" if gone else ""


COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("submit", submit),
    ("list", list_jobs),
    ("top", top),
    ("get", get),
    ("describe", describe),
    ("logs", logs),
    ("wait", wait),
    ("delete", delete),
    ("suspend", suspend),
    ("resume", resume),
    ("plot", plot),
]


def register(app: typer.Typer) -> None:
    """Add the job commands to ``app``."""
    for name, command in COMMANDS:
        app.command(name)(command)


def _namespace_of(document: Obj, given: str | None, context_namespace: str) -> str:
    """Where ``submit`` creates a document: ``--namespace``, else the document's own, else the context's."""
    return given or document.get("metadata", {}).get("namespace") or context_namespace


def _read(file: Path) -> str:
    try:
        return file.read_text()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", EXIT_USAGE)


def _describe_first_failure(job: Obj) -> None:
    """The replica that failed first (``status.firstFailure``), with the last lines it wrote."""
    first = (job.get("status") or {}).get("firstFailure")
    if not first:
        return
    code = f", exit code {first['exitCode']}" if first.get("exitCode") is not None else ""
    console.print(f"[bold]First failure:[/] {escape(kinds.failed_replica(first))}{code}", highlight=False)
    console.print(f"  {first.get('category')}: {first.get('summary')}", highlight=False, markup=False)
    if first.get("logTail"):
        console.print("  last lines it wrote:", highlight=False)
        for line in str(first["logTail"]).splitlines():
            console.print(f"    {line}", highlight=False, markup=False)


def _describe(client: JobClient, job: Obj) -> None:
    meta, status = job["metadata"], job.get("status") or {}
    console.print(
        f"[bold]{job['kind']} {meta['namespace']}/{meta['name']}[/]  {kinds.state(job)}  (age {age(job)})"
    )
    conditions = Grid(("TYPE", "STATUS", "REASON", "MESSAGE", "SINCE"), title="Conditions")
    for c in status.get("conditions") or []:
        conditions.add_row(
            *(str(c.get(key, "")) for key in ("type", "status", "reason", "message", "lastTransitionTime"))
        )
    show(console, conditions)
    replicas = Grid(("REPLICAS", "ACTIVE", "SUCCEEDED", "FAILED"))
    for rtype, counts in kinds.replica_counts(job).items():
        replicas.add_row(rtype, *(str(counts.get(k, 0)) for k in ("active", "succeeded", "failed")))
    show(console, replicas)
    report = kinds.report(job)
    checkpoint = (meta.get("annotations") or {}).get(naming.ANNOTATION_LAST_CHECKPOINT) or report.get(
        "last_checkpoint"
    )
    progress = kinds.progress_line(job)
    if progress:
        console.print(f"[bold]Progress:[/] {escape(progress)}", highlight=False)
    queued = kinds.queued_line(job, client.admission_wait(job))
    if queued:
        console.print(f"[bold]Queue:[/] {escape(queued)}", highlight=False)
    console.print(f"[bold]Last checkpoint:[/] {checkpoint or '-'}")
    if report:
        console.print(f"[bold]Training report:[/] {json.dumps(report, sort_keys=True)}", highlight=False)
    _describe_first_failure(job)
    if status.get("disruptions"):
        console.print(f"[bold]Disruptions:[/] {kinds.disruptions_line(status)}")
    pods = Grid(("POD", "PHASE", "RESTARTS", "NODE"), title="Pods")
    for pod in client.pods(job):
        restarts = sum(s.restart_count or 0 for s in pod.status.container_statuses or [])
        pods.add_row(pod.metadata.name, pod.status.phase or "", str(restarts), pod.spec.node_name or "-")
    show(console, pods)
    events = Grid(("TYPE", "REASON", "MESSAGE"), title="Events")
    for event in client.events(job)[-15:]:
        events.add_row(event.type or "", event.reason or "", event.message or "")
    show(console, events)
