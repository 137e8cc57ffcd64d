"""The object-store commit protocol (``kubetrain/checkpoint_objects.py``) on fsspec's in-memory store,
which refuses a second create of a key as S3 does: what each crash point leaves, who may commit,
what readers trust, what retention removes. The same runs against the dev cluster's real S3 server in
``tests/e2e/test_object_store.py``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest

from kubetrain.checkpoint import CheckpointManager, FencedOff
from kubetrain.checkpoint_objects import ObjectStoreCheckpointManager, plan_retention


@pytest.fixture
def url() -> Iterator[str]:
    location = f"memory://ckpt-{uuid.uuid4().hex[:8]}/job"
    yield location
    fs = fsspec.filesystem("memory")
    fs.rm(location.removeprefix("memory://").split("/")[0], recursive=True)


def manager(url: str, **kwargs: Any) -> ObjectStoreCheckpointManager:
    made = CheckpointManager(url, rank=0, **kwargs)
    assert isinstance(made, ObjectStoreCheckpointManager), "a URL makes the object-store manager"
    return made


def objects(url: str) -> list[str]:
    fs, root = fsspec.core.url_to_fs(url)
    return sorted(key.removeprefix(root.rstrip("/") + "/") for key in fs.find(root))


def test_a_save_is_its_state_then_a_commit_and_loads_back(url: str) -> None:
    ckpt = manager(url)
    saved = ckpt.save({"w": [1, 2]}, 10, metrics={"loss": 0.5})
    assert saved is not None and saved.location == f"{url}/step-00000010"
    [commit, data] = objects(url)
    assert (
        commit == "step-00000010/COMPLETE-a1"
        and data.startswith("step-00000010/a0-")
        and data.endswith("/state.pt")
    )
    manifest = json.loads(fsspec.filesystem("memory").cat_file(f"{url.removeprefix('memory://')}/{commit}"))
    assert manifest["files"][0]["size"] > 0 and len(manifest["files"][0]["sha256"]) == 64
    again = manager(url)
    assert again.load_latest() == ({"w": [1, 2]}, 10)
    assert again.report()["resumed_from_step"] == 10 and ckpt.report()["last_checkpoint"] == saved.location


def test_a_writer_killed_before_its_commit_leaves_no_checkpoint(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = manager(url)
    ckpt.save(b"first", 10)
    real = ckpt.fs.pipe_file

    def killed_at_commit(path: str, value: bytes, **kwargs: Any) -> None:
        if "/COMPLETE-" in path:
            raise KeyboardInterrupt("killed")  # as a SIGKILL between the upload and the commit
        real(path, value, **kwargs)

    monkeypatch.setattr(ckpt.fs, "pipe_file", killed_at_commit)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(b"second", 20)
    assert manager(url).load_latest() == (b"first", 10), "an uncommitted upload was trusted"


def test_a_commit_whose_files_are_not_all_there_is_not_trusted(url: str) -> None:
    ckpt = manager(url)
    ckpt.save(b"first", 10)
    saved = ckpt.save(b"second", 20)
    assert saved is not None
    fs, root = fsspec.core.url_to_fs(url)
    [data] = [k for k in fs.find(root) if "step-00000020/a" in k]
    fs.rm_file(data)
    assert manager(url).load_latest() == (b"first", 10)


def test_a_changed_object_fails_its_checksum(url: str) -> None:
    ckpt = manager(url)
    saved = ckpt.save(b"x" * 10, 10)
    assert saved is not None
    fs, root = fsspec.core.url_to_fs(url)
    [data] = [k for k in fs.find(root) if "/state." in k]
    fs.pipe_file(data, b"y" * 10)
    with pytest.raises(ValueError, match="checksum"):
        manager(url).load_latest()


def test_of_two_writers_of_one_attempt_exactly_one_commits_a_step(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = manager(url, attempt=1), manager(url, attempt=1)
    one = first.save(b"one", 10)
    two = second.save(b"two", 10)
    assert one is not None and two is not None and two.meta["writer"] == one.meta["writer"]
    assert "committed by another writer" in capsys.readouterr().err
    assert manager(url).load_latest() == (b"one", 10)
    assert len([k for k in objects(url) if "/state." in k]) == 1, "the loser's upload was left behind"


def test_a_stale_attempt_is_refused_before_it_writes_and_a_newer_one_wins(url: str) -> None:
    old = manager(url, attempt=1)
    old.save(b"old", 10)
    new = manager(url, attempt=2)
    new.start()
    with pytest.raises(FencedOff) as fenced:
        old.save(b"stale", 20)
    assert fenced.value.code == 86 and url in str(fenced.value)
    assert not [k for k in objects(url) if "step-00000020" in k], "the fenced attempt wrote"
    new.save(b"new", 10)  # the same step, by the newer attempt
    assert manager(url, attempt=2).load_latest() == (b"new", 10)


def test_retention_keeps_the_newest_of_this_lineage_and_nothing_of_others(url: str) -> None:
    other = manager(url, lineage="other")
    other.save(b"theirs", 5)
    ckpt = manager(url, keep=2, lineage="mine")
    for step in (10, 20, 30):
        ckpt.save(str(step).encode(), step)
    steps = sorted({k.split("/")[0] for k in objects(url) if k.startswith("step-")})
    assert steps == ["step-00000005", "step-00000020", "step-00000030"]
    assert [c.step for c in ckpt.checkpoints()] == [5, 20, 30]


def test_retention_removes_what_a_fenced_off_attempt_left_uncommitted(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = manager(url, attempt=1)
    real = old.fs.pipe_file
    monkeypatch.setattr(
        old.fs,
        "pipe_file",
        lambda p, v, **kw: (
            (_ for _ in ()).throw(KeyboardInterrupt()) if "/COMPLETE-" in p else real(p, v, **kw)
        ),
    )
    with pytest.raises(KeyboardInterrupt):
        old.save(b"cut off", 10)
    monkeypatch.undo()
    assert any("/a1-" in k for k in objects(url))
    manager(url, attempt=2).save(b"new", 20)
    assert not any("/a1-" in k for k in objects(url)), "an older attempt's orphan upload was kept"


def test_a_hint_outside_the_location_is_ignored(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = manager(url + "-elsewhere")
    elsewhere.save(b"evil", 99)
    ckpt = manager(url)
    ckpt.save(b"mine", 10)
    monkeypatch.setenv("KUBETRAIN_RESUME_FROM", f"{url}-elsewhere/step-00000099")
    assert ckpt.load_latest() == (b"mine", 10)
    assert "ignoring $KUBETRAIN_RESUME_FROM" in capsys.readouterr().err
    monkeypatch.setenv("KUBETRAIN_RESUME_FROM", f"{url}/step-00000010")
    assert ckpt.resume_point() is not None and ckpt.resume_point().step == 10  # type: ignore[union-attr]


def test_the_plan_deletes_commits_before_files_and_spares_newer_attempts() -> None:
    from pathlib import Path

    from kubetrain.checkpoint import Checkpoint
    from kubetrain.checkpoint_objects import Listing

    def commit(step: int, attempt: int) -> Checkpoint:
        return Checkpoint(
            Path(f"r/step-{step}/COMPLETE-a{attempt}"),
            step,
            {"attempt": attempt, "writer": f"a{attempt}-0-0"},
        )

    chosen = [commit(1, 1), commit(2, 3), commit(3, 1)]
    listing = Listing(
        {str(c.path): c.step for c in chosen},
        {f"r/step-{c.step}/a{c.meta['attempt']}-0-0/state.pt": (1, 0.0) for c in chosen},
    )
    doomed = plan_retention(chosen, listing, keep=1, attempt=1, lineage=None, fencing=True)
    assert doomed == ["r/step-1/COMPLETE-a1", "r/step-1/a1-0-0/state.pt"], "step 2 is a newer attempt's"
