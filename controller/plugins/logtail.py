"""Keep the last lines of a failed container where the controller can read them: its termination message.

A container that fails without writing a termination message gets the tail of
its log as one, when its ``terminationMessagePolicy`` is ``FallbackToLogsOnError``
(the kubelet keeps at most 80 lines or 2048 bytes). The controller sets that
policy on every container that does not choose one (Kubernetes defaults it to
``File``), so the job's failure can quote the replica that failed first
(``controller.diagnosis``) without the controller reading any log. A container
that writes a message (rank 0's ``kubetrain.checkpoint`` report) is not
affected: the kubelet only falls back when the message file is empty.
"""

from __future__ import annotations

from kubetrain.api.objects import Obj
from kubetrain.controller.state import JobView

FALLBACK_TO_LOGS = "FallbackToLogsOnError"


class LogTailPlugin:
    name = "logtail"

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None:
        spec = pod["spec"]
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            container.setdefault("terminationMessagePolicy", FALLBACK_TO_LOGS)
