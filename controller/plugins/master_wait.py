"""The optional master-wait init container of PyTorch Workers (upstream's ``init-pytorch``).

Off by default: torch's rendezvous already waits for the master, and the init
container is a known cause of Workers stuck in Init (DNS policies, air-gapped
image pulls). ``--pytorch-init-container`` turns it on for scripts that rely on it; the
controller then gives it to the PyTorchJob reconciler only.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubetrain.api.objects import Obj
from kubetrain.controller.state import JobView


@dataclass
class MasterWaitPlugin:
    image: str = "alpine:3.10"
    max_tries: int = 100
    name: str = "master-wait"

    def decorate_pod(self, info: JobView, rtype: str, index: int, pod: Obj) -> None:
        if rtype != "Worker" or "Master" not in info.replicas:
            return
        master = f"{info.name}-master-0"
        script = (
            f"err=1; for i in $(seq {self.max_tries}); do if nslookup {master}; then err=0 && break; fi; "
            "echo waiting for master; sleep 2; done; exit $err"
        )
        pod["spec"].setdefault("initContainers", []).append(
            {
                "name": "init-pytorch",
                "image": self.image,
                "imagePullPolicy": "IfNotPresent",
                "resources": {
                    "limits": {"cpu": "100m", "memory": "20Mi"},
                    "requests": {"cpu": "50m", "memory": "10Mi"},
                },
                "command": ["sh", "-c", script],
            }
        )
