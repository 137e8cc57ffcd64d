"""Port isolation for the process node's pods: each pod listens on its own address (``netshim.c``).

The process node's pods share the host's network, so two pods listening on one port (the
``MASTER_PORT`` of two PyTorchJobs, torchrun's 29500) would collide. The shim, compiled here once
per process node with the host's C compiler and preloaded into each container's processes, binds
their wildcard listeners to the pod's own address and sends their connections to loopback on such a
port to it. A host without a C compiler runs pods without it, as before: the node logs that pods
then share ports.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from importlib import resources
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = "netshim.c"


def build(state_dir: Path) -> Path | None:
    """Compile the shim into ``state_dir``; None (logged) when there is no compiler or it fails."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("no C compiler on PATH: pods share the host's ports (two listening on one port collide)")
        return None
    source = state_dir / SOURCE
    source.write_bytes(resources.files("kubetrain.devcluster.processnode").joinpath(SOURCE).read_bytes())
    library = state_dir / "libkubetrain-netshim.so"
    done = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        log.warning("could not build the port isolation shim, pods share the host's ports: %s", done.stderr)
        return None
    return library


def env(library: Path | None, address: str, ports: Path, preload: str = "") -> dict[str, str]:
    """What a container's processes need to listen on the pod's own ``address``; ``preload`` is the
    container's own ``LD_PRELOAD``, kept after the shim."""
    if library is None:
        return {}
    ports.mkdir(parents=True, exist_ok=True)
    return {
        "LD_PRELOAD": " ".join(p for p in (str(library), preload) if p),
        "KUBETRAIN_POD_IP": address,
        "KUBETRAIN_POD_PORTS": str(ports),
    }
