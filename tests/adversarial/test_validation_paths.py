"""Validation a harness cannot tell from use: with the sandbox on, the harness under validation runs from the
sub-run's private copy but sees it at the checkout's own path (`validate.sandbox.inside`), with the same import
path and environment as in a plain run of the checkout.

The harness here is a scripted attacker whose import fails with what it could use to tell the two apart (its
own `__file__`, `sys.path`, the environment's names); the fork server's error message carries it back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_sandbox import need_bwrap

from pytest_ecdysis.validate import sandbox

PROBE = (
    "import os, sys\n"
    "raise RuntimeError('PROBE ' + repr((__file__, [p for p in sys.path if 'ecdysis-agent-' not in p], "
    "sorted(os.environ), os.environ.get('PYTHONNOUSERSITE'))))\n"
)


def test_inside_maps_only_paths_in_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sandbox.ENV_AT, raising=False)
    assert sandbox.inside(Path("/tmp/copy/h")) == Path("/tmp/copy/h")
    monkeypatch.setenv(sandbox.ENV_AT, f"/tmp/copy{os.pathsep}/home/me/repo")
    assert sandbox.relocation() == (Path("/tmp/copy"), Path("/home/me/repo"))
    assert sandbox.inside(Path("/tmp/copy/h/agent.py")) == Path("/home/me/repo/h/agent.py")
    assert sandbox.inside(Path("/tmp/copyx/h")) == Path("/tmp/copyx/h")  # a sibling, not inside
    assert sandbox.inside(Path("/usr/lib")) == Path("/usr/lib")
    monkeypatch.setenv(sandbox.ENV_AT, "relative")  # malformed: nothing is moved
    assert sandbox.relocation() is None


def _probe(harness: Path) -> str:
    from pytest_ecdysis_tau2.harness_process import agent_wire
    from pytest_ecdysis_tau2.harness_process.agent_process import check_harness

    try:
        message = check_harness(harness) or ""
    finally:
        agent_wire.agent_process(harness).close()
    assert "PROBE" in message, message
    return message[message.index("PROBE") :]


def test_a_harness_sees_the_same_paths_in_validation_as_in_a_plain_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same harness, once in the checkout (a plain run) and once in a sub-run's private copy (validation):
    its `__file__`, import path and environment are the same, so behaviour keyed on them cannot differ."""
    need_bwrap()
    pytest.importorskip("tau2")
    monkeypatch.setenv(sandbox.ENV_ON, "1")
    monkeypatch.delenv("ECDYSIS_AGENT_PROCESS", raising=False)
    checkout, copy = tmp_path / "checkout", tmp_path / "private" / "tree"
    (checkout / "probe_harness").mkdir(parents=True)
    (checkout / "probe_harness" / "__init__.py").write_text(PROBE)
    shutil.copytree(checkout, copy)
    monkeypatch.delenv(sandbox.ENV_AT, raising=False)
    plain = _probe(checkout / "probe_harness")
    monkeypatch.setenv(sandbox.ENV_AT, f"{copy}{os.pathsep}{checkout}")
    validated = _probe(copy / "probe_harness")
    assert str(checkout / "probe_harness" / "__init__.py") in plain
    assert str(copy) not in validated
    assert validated == plain


def test_a_copy_seen_at_a_checkout_that_holds_the_venv_keeps_the_venv_reachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkout holds the interpreter's venv (`.venv`, as `scripts/setup.sh` makes it) and its root is on
    the import path: its copy, which has no `.venv`, is seen at the checkout's path rebuilt entry by entry, so
    the venv's own bind still has its mount point; the rebuilt root is read-only like a bound one."""
    need_bwrap()
    checkout, copy = tmp_path / "checkout", tmp_path / "private" / "tree"
    (checkout / "pkg").mkdir(parents=True)
    (checkout / "pkg" / "mod.py").write_text("X = 1\n")
    (checkout / "link").symlink_to("pkg")
    venv_bin = checkout / ".venv" / "bin"  # stands for a venv inside the checkout
    venv_bin.mkdir(parents=True)
    (venv_bin / "tool").write_text("tool\n")
    shutil.copytree(checkout, copy, symlinks=True, ignore=shutil.ignore_patterns(".venv"))
    monkeypatch.setenv(sandbox.ENV_AT, f"{copy}{os.pathsep}{checkout}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = (
        "import os, sys; r = sys.argv[1]; "
        "print(open(r + '/pkg/mod.py').read().strip(), open(r + '/.venv/bin/tool').read().strip(), "
        "os.readlink(r + '/link'), end=' ')\n"
        "try:\n    open(r + '/new', 'w')\nexcept OSError:\n    print('read-only')\n"
    )
    command = sandbox.wrap_command(
        [sys.executable, "-S", "-c", code, str(checkout)],
        visible=[copy, venv_bin],
        scratch=scratch,
        force=True,
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["X", "=", "1", "tool", "pkg", "read-only"]


def test_run_directories_hidden_past_a_copy_that_holds_their_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout with a committed `.ecdysis/` (the gate's baseline) and its run directories beside it, a venv
    inside it: the sub-run's copy holds `.ecdysis/baseline.json` and no runs. The sandbox starts (covering
    the runs there needed a mount point inside the copy's read-only `.ecdysis`), the baseline reads as in the
    checkout, and the checkout's runs stay out of sight; a copy that does hold a runs directory shows it
    empty."""
    need_bwrap()
    checkout, copy = tmp_path / "checkout", tmp_path / "private" / "tree"
    (checkout / ".ecdysis").mkdir(parents=True)
    (checkout / ".ecdysis" / "baseline.json").write_text("{}\n")
    venv_bin = checkout / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    shutil.copytree(checkout, copy, symlinks=True, ignore=shutil.ignore_patterns(".venv"))
    runs = checkout / ".ecdysis" / "runs"
    (runs / "r1").mkdir(parents=True)
    (runs / "r1" / "trials.jsonl").write_text("secret\n")
    monkeypatch.setenv(sandbox.ENV_AT, f"{copy}{os.pathsep}{checkout}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = (
        "import os, sys; r = sys.argv[1]; "
        "print(open(r + '/.ecdysis/baseline.json').read().strip(), "
        "os.listdir(r + '/.ecdysis/runs') if os.path.isdir(r + '/.ecdysis/runs') else 'none')\n"
    )

    def run() -> list[str]:
        command = sandbox.wrap_command(
            [sys.executable, "-S", "-c", code, str(checkout)],
            visible=[copy, venv_bin],
            scratch=scratch,
            hide=[runs],
            force=True,
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert run() == ["{}", "none"]
    (copy / ".ecdysis" / "runs" / "r1").mkdir(parents=True)  # a copy that holds runs of its own
    (copy / ".ecdysis" / "runs" / "r1" / "trials.jsonl").write_text("secret\n")
    assert run() == ["{}", "[]"]
