"""What the Kubernetes runtime reports about itself, to whoever measures it.

The runtime (client, informers, leader election, work queue, reconcile runner)
is used by the controller, the process node and tools alike, so it must not
depend on a metrics library. It reports to one ``Observer``; the controller
installs its Prometheus adapter (``kubetrain.controller.metrics``) at start,
and everything else keeps the default, which records nothing.
"""

from __future__ import annotations


class Observer:
    """Records nothing; an adapter overrides what it measures."""

    def api_request(self, method: str, resource: str, code: str, seconds: float | None) -> None:
        """One API request ended: the HTTP code ("error" when no answer came) and how long it took."""

    def api_throttled(self, seconds: float) -> None:
        """The client's rate limiter held a request back this long."""

    def watch_restarted(self, resource: str, reason: str) -> None:
        """An informer started its watch again: "gone" (410), "stalled" or "error"."""

    def cached(self, resource: str, objects: int) -> None:
        """An informer's cache now holds this many objects."""

    def leading(self, leading: bool) -> None:
        """This replica became the leader, or stopped being it."""

    def workers(self, controller: str, count: int) -> None:
        """How many reconciles of ``controller`` may run at once."""

    def reconcile_started(self, controller: str) -> None:
        """A worker of ``controller`` took a key."""

    def reconciled(self, controller: str, result: str, seconds: float) -> None:
        """A reconcile ended: "success", "requeue_after", "error" or "cancelled"."""

    def reconcile_panicked(self, controller: str) -> None:
        """A reconcile raised an error nobody expected (a bug, logged with its traceback)."""

    def queued(self, queue: str, depth: int) -> None:
        """A key was added to the queue (``depth``: the keys waiting now)."""

    def queue_changed(self, queue: str, depth: int) -> None:
        """The keys waiting in the queue changed."""

    def queue_retried(self, queue: str) -> None:
        """A key was queued again after a failure."""

    def queue_waited(self, queue: str, seconds: float) -> None:
        """A key waited this long between being added and being taken."""


class _Installed:
    observer = Observer()


def current() -> Observer:
    """The observer the runtime reports to."""
    return _Installed.observer


def install(observer: Observer) -> None:
    """Report to ``observer`` from now on (the controller's metrics, a test's recorder)."""
    _Installed.observer = observer
