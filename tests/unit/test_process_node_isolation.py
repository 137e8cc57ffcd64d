"""The port isolation env a container gets: the shim first, the container's own preload kept."""

from __future__ import annotations

from pathlib import Path

from kubetrain.devcluster.processnode import isolation


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
