"""Every Prometheus metric the controller exports, in one registry.

The job counters keep the upstream Training Operator names and labels
(``training_operator_jobs_*_total{job_namespace,framework}``) so existing
dashboards and alerts keep working. Reconcile, queue and API-client metrics
follow controller-runtime's vocabulary; the Kubernetes runtime (``kubetrain.kube``)
reports them through its ``Observer``, which ``install`` points at these series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from kubetrain.controller.jobmetrics import JobProgressCollector
from kubetrain.kube import observer
from kubetrain.kube.observer import Observer

disable_created_metrics()  # type: ignore[no-untyped-call]  # keep /metrics to the series people graph

REGISTRY = CollectorRegistry()

_JOB_LABELS = ("job_namespace", "framework")

jobs_created = Counter(
    "training_operator_jobs_created_total", "Jobs seen for the first time.", _JOB_LABELS, registry=REGISTRY
)
jobs_deleted = Counter(
    "training_operator_jobs_deleted_total",
    "Jobs deleted by the controller (TTL).",
    _JOB_LABELS,
    registry=REGISTRY,
)
jobs_successful = Counter(
    "training_operator_jobs_successful_total", "Jobs that succeeded.", _JOB_LABELS, registry=REGISTRY
)
jobs_failed = Counter(
    "training_operator_jobs_failed_total", "Jobs that failed, for any reason.", _JOB_LABELS, registry=REGISTRY
)
jobs_restarted = Counter(
    "training_operator_jobs_restarted_total",
    "Replica restarts the controller observed.",
    _JOB_LABELS,
    registry=REGISTRY,
)
jobs_disrupted = Counter(
    "kubetrain_jobs_disrupted_total",
    "Pods of jobs stopped by a disruption (preemption, eviction, drain, node loss): recreated, not counted "
    "as restarts.",
    _JOB_LABELS,
    registry=REGISTRY,
)

reconcile_total = Counter(
    "kubetrain_reconcile_total",
    "Reconciles by controller and result.",
    ("controller", "result"),
    registry=REGISTRY,
)
reconcile_errors = Counter(
    "kubetrain_reconcile_errors_total",
    "Reconciles that returned an error.",
    ("controller",),
    registry=REGISTRY,
)
reconcile_panics = Counter(
    "kubetrain_reconcile_panics_total",
    "Reconciles that raised an unexpected exception.",
    ("controller",),
    registry=REGISTRY,
)
reconcile_time = Histogram(
    "kubetrain_reconcile_time_seconds",
    "Time spent in one reconcile.",
    ("controller",),
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
active_workers = Gauge(
    "kubetrain_active_workers", "Workers reconciling right now.", ("controller",), registry=REGISTRY
)
max_concurrent_reconciles = Gauge(
    "kubetrain_max_concurrent_reconciles", "Configured workers.", ("controller",), registry=REGISTRY
)

queue_depth = Gauge(
    "kubetrain_workqueue_depth", "Keys waiting in the work queue.", ("name",), registry=REGISTRY
)
queue_adds = Counter(
    "kubetrain_workqueue_adds_total", "Keys added to the work queue.", ("name",), registry=REGISTRY
)
queue_retries = Counter(
    "kubetrain_workqueue_retries_total", "Rate-limited re-adds.", ("name",), registry=REGISTRY
)
queue_latency = Histogram(
    "kubetrain_workqueue_queue_duration_seconds",
    "Time a key waits before a worker takes it.",
    ("name",),
    buckets=(0.0001, 0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60),
    registry=REGISTRY,
)

api_requests = Counter(
    "kubetrain_kube_api_requests_total",
    "Requests to the API server.",
    ("verb", "resource", "code"),
    registry=REGISTRY,
)
api_request_time = Histogram(
    "kubetrain_kube_api_request_duration_seconds",
    "API request latency.",
    ("verb", "resource"),
    registry=REGISTRY,
)
api_throttled = Counter(
    "kubetrain_kube_api_throttled_seconds_total",
    "Seconds requests waited for the client-side rate limiter.",
    registry=REGISTRY,
)

watch_restarts = Counter(
    "kubetrain_watch_restarts_total",
    "Watches restarted, by resource and reason.",
    ("resource", "reason"),
    registry=REGISTRY,
)
informer_objects = Gauge(
    "kubetrain_informer_objects", "Objects held in an informer cache.", ("resource",), registry=REGISTRY
)
leader = Gauge("kubetrain_leader", "1 while this replica is the leader.", registry=REGISTRY)
job_progress = JobProgressCollector()  # kubetrain_job_*: what each unfinished job last reported
REGISTRY.register(job_progress)


class PrometheusObserver(Observer):
    """The Kubernetes runtime's reports as the series above (installed by the controller at start)."""

    def api_request(self, method: str, resource: str, code: str, seconds: float | None) -> None:
        api_requests.labels(method, resource, code).inc()
        if seconds is not None:
            api_request_time.labels(method, resource).observe(seconds)

    def api_throttled(self, seconds: float) -> None:
        api_throttled.inc(seconds)

    def watch_restarted(self, resource: str, reason: str) -> None:
        watch_restarts.labels(resource, reason).inc()

    def cached(self, resource: str, objects: int) -> None:
        informer_objects.labels(resource).set(objects)

    def leading(self, leading: bool) -> None:
        leader.set(1 if leading else 0)

    def workers(self, controller: str, count: int) -> None:
        max_concurrent_reconciles.labels(controller).set(count)

    def reconcile_started(self, controller: str) -> None:
        active_workers.labels(controller).inc()

    def reconciled(self, controller: str, result: str, seconds: float) -> None:
        active_workers.labels(controller).dec()
        reconcile_time.labels(controller).observe(seconds)
        if result == "cancelled":
            return
        reconcile_total.labels(controller, result).inc()
        if result == "error":
            reconcile_errors.labels(controller).inc()

    def reconcile_panicked(self, controller: str) -> None:
        reconcile_panics.labels(controller).inc()

    def queued(self, queue: str, depth: int) -> None:
        queue_adds.labels(queue).inc()
        queue_depth.labels(queue).set(depth)

    def queue_changed(self, queue: str, depth: int) -> None:
        queue_depth.labels(queue).set(depth)

    def queue_retried(self, queue: str) -> None:
        queue_retries.labels(queue).inc()

    def queue_waited(self, queue: str, seconds: float) -> None:
        queue_latency.labels(queue).observe(seconds)


def install() -> None:
    """Make the Kubernetes runtime report into these series."""
    observer.install(PrometheusObserver())
