"""An editor cannot damage the repository (edit.contain, validate.integrity): the editor writes git objects
into its own object directory (the repository's store its read-only alternate), imported after the call, so
under the sandbox an editor that renames, deletes or overwrites the repository's objects (or plants a file
among them) fails and the repository, and a clone sharing its packs by hard link, stay whole while the
editor's own `git add` and `git commit` still work. Without the sandbox the same attack lands, and the object
store's part of the integrity check (`integrity.git_objects`) lists the damage; the loop's message names the
editor call as the cause and suggests nothing that writes the repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_sandbox import need_bwrap

from pytest_ecdysis.edit import contain
from pytest_ecdysis.edit.editors import CommandEditor
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.git.env import child_env
from pytest_ecdysis.validate import integrity

ATTACK = r"""
import json, pathlib, subprocess, sys
mode, harness = sys.argv[1], pathlib.Path(sys.argv[2])
(harness / "new.py").write_text("N = 1\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "-c", "user.name=e", "-c", "user.email=e@x", "commit", "-qm", "editor"], check=True)
common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
                        capture_output=True, text=True, check=True).stdout.strip()
objects, hit = pathlib.Path(common) / "objects", []
for path in [p for p in objects.rglob("*") if p.is_file()]:
    try:
        if mode == "rename":
            path.rename(path.with_name(path.name + ".aside"))
        elif mode == "delete":
            path.unlink()
        else:  # in place: a pack shared by hard link with another clone changes there too
            with open(path, "r+b") as fh:
                fh.seek(12)
                fh.write(b"\0" * 16)
        hit.append(str(path))
    except OSError:
        pass
try:
    (objects / "run.sh").write_text("echo planted\n")
    hit.append("run.sh")
except OSError:
    pass
print(json.dumps(hit))
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=child_env(), capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, Path]:
    """(origin, the user's checkout): the checkout a `git clone <path>` of the origin (its pack shared by
    hard link), with a loose object of its own."""
    origin = tmp_path / "origin"
    (origin / "harness").mkdir(parents=True)
    (origin / "harness" / "__init__.py").write_text("LEVEL = 1\n")
    (origin / "suite.py").write_text("S = 1\n")
    git(origin, "init", "-q", "-b", "main")
    git(origin, "add", "-A")
    git(origin, "-c", "user.name=d", "-c", "user.email=d@x", "commit", "-qm", "init")
    git(origin, "gc", "-q")
    user = tmp_path / "user"
    git(tmp_path, "clone", "-q", str(origin), str(user))
    (user / "suite.py").write_text("S = 2\n")
    git(user, "add", "suite.py")
    git(user, "-c", "user.name=d", "-c", "user.email=d@x", "commit", "-qm", "two")
    packs = list((user / ".git" / "objects" / "pack").glob("*.pack"))
    assert packs and packs[0].stat().st_nlink == 2  # shared with the origin
    return origin, user


def pack_bytes(repo: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (repo / ".git" / "objects" / "pack").iterdir()}


@pytest.mark.parametrize("mode", ["rename", "delete", "overwrite"])
def test_an_editor_in_the_sandbox_cannot_damage_the_object_store(
    clone: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    mode: str,
) -> None:
    need_bwrap()
    origin, user = clone
    monkeypatch.setenv(contain.SANDBOX_ENV, "1")
    monkeypatch.delenv(contain.WRITABLE_ENV, raising=False)
    agent = tmp_path_factory.mktemp("agent") / "agent.py"
    agent.write_text(ATTACK)
    before, packs = integrity.git_objects(user), pack_bytes(origin)
    wt = gitworktree.add_worktree(user / "harness")
    try:
        result = CommandEditor(f"{sys.executable} {agent} {mode} {{harness}}").edit(
            None, wt.harness_dir, spec_path=user / "spec.json"
        )
        assert result.ok, result.detail
        head = git(wt.path, "rev-parse", "HEAD")
        assert git(user, "cat-file", "-t", head) == "commit"  # the editor's commit, imported
        assert git(user, "show", f"{head}:harness/new.py") == "N = 1"
        assert "harness/new.py" in git(wt.path, "diff", "--name-only", wt.commit, "HEAD")
    finally:
        wt.remove()
    after = integrity.git_objects(user)
    assert integrity.object_changes(before, after) == []
    assert after[integrity.CONNECTIVITY] == "ok"
    assert pack_bytes(origin) == packs  # the clone sharing the pack is untouched
    git(user, "fsck", "--no-dangling")


@pytest.mark.parametrize("mode", ["rename", "delete", "overwrite"])
def test_without_the_sandbox_the_damage_is_listed_and_the_editor_named(
    clone: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    mode: str,
) -> None:
    from types import SimpleNamespace

    from pytest_ecdysis.core.errors import IntegrityError
    from pytest_ecdysis.evolve.runs import TrustedRuns
    from pytest_ecdysis.validate import pycache

    _, user = clone
    monkeypatch.setenv(contain.SANDBOX_ENV, "0")
    agent = tmp_path_factory.mktemp("agent") / "agent.py"
    agent.write_text(ATTACK)
    roots = integrity.protected_roots(user)
    roots = {"your checkout": roots["your checkout"]}
    start = integrity.take(roots)
    wt = gitworktree.add_worktree(user / "harness")
    try:
        CommandEditor(f"{sys.executable} {agent} {mode} {{harness}}").edit(
            None, wt.harness_dir, spec_path=user / "spec.json"
        )
        damage = integrity.object_changes(start["git objects"], integrity.git_objects(user), limit=1000)
        assert any(" removed" in p or " changed" in p for p in damage), damage
        assert any("run.sh added (not a git object)" in p for p in damage), damage
        runs = SimpleNamespace(
            ledger=SimpleNamespace(start=start), roots=roots, pycache_start=pycache.digests(), stop_error=None
        )
        with pytest.raises(IntegrityError) as caught:
            TrustedRuns.check_integrity(runs, "the editor call (--ecdysis-editor cmd:agent)")  # type: ignore[arg-type]
    finally:
        shutil.rmtree(
            wt.path.parent, ignore_errors=True
        )  # the repository is broken: no `git worktree remove`
    said = str(caught.value)
    assert said.startswith(
        "the editor call (--ecdysis-editor cmd:agent) damaged your repository's object store"
    )
    assert "run no git command that writes the repository (gc, prune" in said
    assert "--ecdysis-resume" not in said and "pip install" not in said


def test_a_clean_store_and_the_evolutions_own_objects_are_no_change(clone: tuple[Path, Path]) -> None:
    """Objects and packs git adds (the evolution's commits, an editor's imported objects) are not damage."""
    _, user = clone
    before = integrity.git_objects(user)
    assert before[integrity.CONNECTIVITY] == "ok"
    (user / "harness" / "b.py").write_text("B = 1\n")
    git(user, "add", "-A")
    git(user, "-c", "user.name=d", "-c", "user.email=d@x", "commit", "-qm", "three")
    git(user, "repack", "-q")  # a new pack beside the old one (no -d: nothing removed)
    assert integrity.object_changes(before, integrity.git_objects(user)) == []
