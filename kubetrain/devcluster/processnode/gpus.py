"""The GPUs of the process node: those this host has, and which pod holds which.

Apart from the agent (which counts them into the Node's capacity) so that a pod worker can take and
give back its devices without importing the agent.
"""

from __future__ import annotations

import shutil
import subprocess


def detect_gpus() -> list[str]:
    """Indices of the real NVIDIA GPUs on this host (none without ``nvidia-smi``)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


class GpuAllocator:
    """Hands out GPU indices to pods (real devices become ``CUDA_VISIBLE_DEVICES``)."""

    def __init__(self, devices: list[str]) -> None:
        self.devices = devices
        self._owner: dict[str, str] = {}

    def allocate(self, uid: str, count: int) -> list[str]:
        if not self.devices or count <= 0:
            return []
        free = [d for d in self.devices if d not in self._owner]
        taken = free[:count]
        for device in taken:
            self._owner[device] = uid
        return taken

    def release(self, uid: str) -> None:
        for device in [d for d, owner in self._owner.items() if owner == uid]:
            del self._owner[device]
