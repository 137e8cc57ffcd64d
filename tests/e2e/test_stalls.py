"""A job that hangs is restarted when it stops reporting progress, and resumes from its checkpoint.

A real process on the process node reports progress through the status server (``kubetrain.progress``)
and hangs at step 25 on its first run: no failure ever comes, only silence. The controller, told to
allow 15 s of it, restarts the pod; the new process resumes from step 20 and finishes.
"""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any

from kubernetes_asyncio import client

from kubetrain.devcluster.process import free_port
from tests.support import Jobs

HANGS_ONCE = """
import time
from kubetrain.checkpoint import CheckpointManager
from kubetrain.progress import report_progress
ckpt = CheckpointManager(keep=2)
ckpt.install_report_on_exit()
resumed = ckpt.load_latest()
start = resumed[1] if resumed else 0
for step in range(start + 1, 41):
    time.sleep(0.2)
    report_progress(step, total=40)
    if step % 10 == 0:
        ckpt.save(b"state", step)
    if step == 25 and start == 0:
        print("hanging at step 25", flush=True)
        time.sleep(3600)
ckpt.write_report()
"""


async def test_a_job_that_stops_reporting_is_restarted_and_resumes_from_its_checkpoint(
    start_controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    port = free_port()
    await start_controller(
        status_server_bind_address=f"127.0.0.1:{port}", status_server_url=f"https://127.0.0.1:{port}"
    )
    await core.create_namespaced_persistent_volume_claim(
        namespace,
        {"metadata": {"name": "ckpt"}, "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}},
    )  # fmt: skip
    container = {
        "name": "pytorch",
        "image": "python",
        "command": [sys.executable, "-u", "-c", textwrap.dedent(HANGS_ONCE)],
    }
    await jobs.create(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {
                "name": "hangs",
                "annotations": {
                    "kubetrain.dev/stall-timeout-seconds": "15",
                    "kubetrain.dev/checkpoint-dir": "/checkpoints",
                    "kubetrain.dev/checkpoint-volume": "ckpt",
                },
            },
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {
                        "replicas": 1,
                        "restartPolicy": "OnFailure",
                        "template": {
                            "spec": {
                                "nodeSelector": {"kubetrain.dev/process-node": "true"},
                                "tolerations": [{"key": "kubetrain.dev/process-node", "operator": "Exists"}],
                                "containers": [container],
                                "terminationGracePeriodSeconds": 2,
                            }
                        },
                    }
                }
            },
        }
    )
    job = await jobs.wait_condition("hangs", "Succeeded", timeout=240)
    assert (job["status"]["stalls"], job["status"]["restartCount"]) == (1, 1), job["status"]
    stalled = [message for _, reason, message in await jobs.events("hangs") if reason == "Stalled"]
    assert len(stalled) == 1 and "reported no progress for" in stalled[0], stalled
    report = json.loads(job["metadata"]["annotations"]["kubetrain.dev/training-report"])
    assert (report["status"], report["step"], report["resumed_from_step"]) == ("completed", 40, 20)
