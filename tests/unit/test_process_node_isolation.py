"""The port isolation env a container gets: the shim first, the container's own preload kept; and how
a container starts when the node hides the cluster's state dir from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.devcluster.processnode import agent, confine, containers, isolation


def test_a_container_gets_the_shim_its_address_and_its_pods_ports_dir(tmp_path: Path) -> None:
    library = tmp_path / "libkubetrain-netshim.so"
    env = isolation.env(library, "127.1.0.7", tmp_path / "pod" / "ports", "/opt/jemalloc.so")
    assert env == {
        "LD_PRELOAD": f"{library} /opt/jemalloc.so",
        "KUBETRAIN_POD_IP": "127.1.0.7",
        "KUBETRAIN_POD_PORTS": str(tmp_path / "pod" / "ports"),
    }
    assert (tmp_path / "pod" / "ports").is_dir()
    assert isolation.env(library, "127.1.0.7", tmp_path / "p")["LD_PRELOAD"] == str(library)


def test_without_the_shim_nothing_is_added(tmp_path: Path) -> None:
    assert isolation.env(None, "127.1.0.7", tmp_path / "ports") == {}


def test_a_confined_container_starts_through_the_wrapper_with_its_program_looked_up_first(
    tmp_path: Path,
) -> None:
    """The wrapper (confine.py) replaces itself with the program; the node looks the program up on the
    container's PATH beforehand, so a missing one fails to start as it does without a wrapper."""
    program = tmp_path / "bin" / "train"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    wrapper = ["python", "confine.py", "--hide", "/state", "--keep", "/state/pods/u", "--"]

    def run(argv: list[str]) -> containers.Run:
        env = {"PATH": f"/nowhere:{program.parent}"}
        return containers.Run(argv=argv, env=env, cwd=tmp_path, log_path=tmp_path / "log", wrapper=wrapper)

    # The program's path, then argv as the container wrote it (its argv[0] unchanged).
    assert run(["train", "--lr", "1"])._command() == [*wrapper, str(program), "train", "--lr", "1"]
    assert run(["./local", "x"])._command() == [*wrapper, "./local", "./local", "x"]  # from its workingDir
    with pytest.raises(FileNotFoundError):
        run(["missing"])._command()
    unwrapped = containers.Run(argv=["train"], env={}, cwd=tmp_path, log_path=tmp_path / "log")
    assert unwrapped._command() == ["train"]


def test_the_wrapper_names_the_hidden_dirs_and_what_each_pod_keeps(tmp_path: Path) -> None:
    settings = agent.Settings(
        name="n", state_dir=tmp_path, port=1, cert=tmp_path, key=tmp_path, ca=tmp_path, workdir=tmp_path,
        api_server="https://127.0.0.1:6443", hide=[tmp_path / "state"],
    )  # fmt: skip
    node = agent.Agent.__new__(agent.Agent)
    node.settings = settings
    node.confinement = []
    assert node.confined([tmp_path / "pod"]) == []  # unchecked, or refused by the host: no wrapper
    node.confinement = ["python", "-I", "-S", confine.__file__, "--hide", str(tmp_path / "state")]
    assert node.confined([tmp_path / "pod", tmp_path / "claim"]) == [
        *node.confinement,
        *("--keep", str(tmp_path / "pod"), "--keep", str(tmp_path / "claim")),
        "--",
    ]
