"""The controller imports kubernetes_asyncio's transport and kubeconfig loading only, and code that uses
the generated API in the same process still gets all of it."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import kubetrain.cli  # what the image runs: kubetrain controller run
import kubetrain.controller.main
loaded = sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio"))
assert len(loaded) < 40 and not any(".models." in m or ".api." in m for m in loaded), loaded
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client import ApiException, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException as raised
assert ApiException is raised and client.ApiException is raised
assert client.V1Pod(metadata=client.V1ObjectMeta(name="p")).metadata.name == "p"
assert CoreV1Api is client.CoreV1Api and watch.Watch and config.load_kube_config
from kubetrain.client import AsyncJobClient, JobClient
from kubernetes_asyncio import __version__  # what its package __init__ sets, as any name it defines
from kubernetes_asyncio.dynamic.exceptions import ResourceNotFoundError
print("ok", len(loaded))
"""


def test_the_controller_leaves_the_generated_api_out_until_someone_uses_it() -> None:
    run = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0 and run.stdout.startswith("ok"), run.stdout + run.stderr


def test_a_process_that_imported_kubernetes_asyncio_first_keeps_it_as_it_is() -> None:
    script = (
        "import kubernetes_asyncio.client as c; import kubetrain.kube.client as k; assert k.k8s_client is c"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr


def test_the_controller_loads_cryptography_only_to_serve_progress_reports() -> None:
    """About 8 MiB per controller process: only one with ``--status-server-bind-address`` needs it."""
    script = (
        "import sys, kubetrain.cli, kubetrain.controller.main as m\n"
        "assert not any(n.startswith('cryptography') for n in sys.modules), 'imported with the controller'\n"
        "m.Options(status_server_bind_address=':8443').status_server_cert()\n"
        "assert 'cryptography.x509' in sys.modules\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
