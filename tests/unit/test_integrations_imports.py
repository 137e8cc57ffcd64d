"""The trainer integrations import without their extras, and nothing else imports the trainers."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

WITHOUT_EXTRAS = """
import sys
sys.modules["transformers"] = None  # as if the hf and lightning extras were not installed
sys.modules["lightning"] = None
sys.modules["lightning.pytorch"] = None
from kubetrain.integrations import hf, lightning
for module in (hf, lightning):
    try:
        module.KubetrainCallback()
    except ImportError as error:
        assert "pip install 'kubetrain[" in str(error), error
    else:
        raise AssertionError(f"{module.__name__} made a callback without its trainer")
print("ok")
"""

CONTROLLER = """
import sys
import kubetrain.cli, kubetrain.controller.main, kubetrain.checkpoint, kubetrain.progress, kubetrain.layouts
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("transformers", "lightning", "kubetrain.integrations"))
assert not heavy and "kubetrain.integrations" not in sys.modules, heavy
print("ok")
"""


@pytest.mark.parametrize("script", [WITHOUT_EXTRAS, CONTROLLER], ids=["without-extras", "controller"])
def test_imports(script: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr


def test_the_documented_lines_name_what_the_integrations_export() -> None:
    """docs/checkpoints.md's lines for each trainer: their imports resolve, and each names the
    integration's callback and resume point."""
    from tests.docs_commands import python_blocks

    _loop, _sharded, *trainers = python_blocks("docs/checkpoints.md")
    assert len(trainers) == 2, "one block for the Hugging Face Trainer, one for Lightning"
    for block, module in zip(trainers, ("hf", "lightning"), strict=True):
        imports = "\n".join(line for line in block.splitlines() if line.startswith("from kubetrain"))
        assert imports == f"from kubetrain.integrations.{module} import KubetrainCallback, resume_point"
        exec(imports, {})  # the documented import line itself
        assert "KubetrainCallback()" in block and "resume_point(" in block, block
