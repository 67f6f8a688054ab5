"""The OS sandbox and the per-process bounds of harness code: the default
(`--ecdysis-sandbox auto`) decides once, says so when harness code runs with the user's rights, refuses
`on` where bubblewrap cannot start, starts a venv that lives under /tmp, reports a sandbox that does not
start as an infrastructure error, and bounds memory and CPU time with and without bubblewrap.

The harnesses here are scripted attackers; the sandboxed ones run in CI with the sandbox on
(`scripts/setup.sh` installs Debian's bubblewrap): without `bwrap` these tests fail under `CI=true` and
skip elsewhere, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from test_records_pipeline import env  # noqa: F401  (the fixture: no simulated server, a fresh run id)

from pytest_ecdysis.core.errors import InfrastructureError, UsageError
from pytest_ecdysis.validate import limits, sandbox

pytest_plugins = ["pytester"]


def need_bwrap() -> None:
    """Skip (fail in CI, where scripts/setup.sh installs it) when no sandbox can start here."""
    why = sandbox.probe()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the sandbox: {why} (scripts/setup.sh installs Debian's bubblewrap)")
        pytest.skip(f"{why}: install it with {sandbox.INSTALL}")


def fake_bwrap(tmp_path: Path, message: str) -> Path:
    """A directory with a `bwrap` that prints `message` and fails, as a bubblewrap that cannot start does."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "bwrap").write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    (bin_dir / "bwrap").chmod(0o755)
    return bin_dir


def test_decisions_without_bubblewrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No bwrap on PATH: `auto` is off with one reason naming the install command, `on` is a usage error
    naming it, `off` is off; a bwrap that cannot create namespaces is named with its own message."""
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    auto = sandbox.decide("auto")
    assert not auto.on and "not installed" in auto.why and sandbox.INSTALL in auto.why
    with pytest.raises(UsageError, match="apt-get install bubblewrap"):
        sandbox.decide("on")
    assert not sandbox.decide("off").on
    monkeypatch.setenv("PATH", str(fake_bwrap(tmp_path, "bwrap: setting up uid map: Permission denied")))
    auto = sandbox.decide("auto")
    assert (
        not auto.on and "setting up uid map: Permission denied" in auto.why and "user namespaces" in auto.why
    )
    with pytest.raises(UsageError, match="uid map"):
        sandbox.decide("on")
    monkeypatch.setenv(sandbox.ENV_ON, "0")
    monkeypatch.setenv(sandbox.ENV_WHY, auto.why)
    assert sandbox.status_line().startswith("no OS sandbox: harness code runs with your rights: bubblewrap")
    line = sandbox.verdict_line()
    assert "ancestors' environments" in line and "the network" in line and "writes to the venv" in line


def test_on_without_bubblewrap_is_a_usage_error_before_any_trial(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--ecdysis-sandbox on` where no bwrap is installed: exit status 4 before any test ran, naming the
    install command; `auto` runs the same suite and says once that harness code runs with your rights."""
    monkeypatch.setenv("PATH", str(pytester.path / "nobin"))
    pytester.makepyfile(test_x="def test_one():\n    pass\n")
    refused = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--ecdysis-sandbox", "on", "--ecdysis-run-dir", str(pytester.path / "runs")
    )
    assert refused.ret == 4
    assert "apt-get install bubblewrap" in refused.stderr.str()
    assert "test_one" not in refused.stdout.str()
    auto = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--ecdysis-run-dir", str(pytester.path / "runs")
    )
    assert auto.ret == 0
    said = [line for line in auto.stdout.lines if "harness code runs with your rights" in line]
    assert len(said) == 1 and "apt-get install bubblewrap" in said[0], auto.stdout.str()


def test_a_venv_under_tmp_starts_in_the_sandbox(tmp_path: Path) -> None:
    """A venv under /tmp (where every candidate's sub-run once ran from, and broke): its interpreter
    starts in the sandbox, because the prefixes are bound back after /tmp is emptied."""
    need_bwrap()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    root = Path(sandbox.__file__).resolve().parents[2]
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from pytest_ecdysis.validate import sandbox; print(sandbox.probe())",
        ],
        env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{sysconfig.get_path('purelib')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert str(venv).startswith(("/tmp", os.environ.get("TMPDIR", "/tmp")))
    assert done.stdout.strip() == "None", done.stdout + done.stderr


def test_the_file_system_is_an_allowlist(tmp_path: Path) -> None:
    """Only the system's programs and libraries, the interpreter, its import path and the visible paths are
    there: a second τ² checkout elsewhere on disk (here under /var/tmp, which the whole-disk bind showed), the
    home directory and a base interpreter's package directory that is not on the import path are not; what
    is visible stays readable and the scratch directory writable."""
    import shutil
    import tempfile

    need_bwrap()
    other = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="ecdysis-other-tau2-"))
    try:
        gold = other / "tau2" / "data" / "tau2" / "domains" / "airline" / "tasks.json"
        gold.parent.mkdir(parents=True)
        gold.write_text('[{"id": "0"}]')
        shown = tmp_path / "shown"
        shown.mkdir()
        (shown / "ok.txt").write_text("ok")
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        base_site = Path(
            sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"]
        )
        code = (
            "import os, sys, json; p = json.loads(sys.argv[1]); "
            "print(json.dumps({k: os.path.exists(v) and bool(os.listdir(v) if os.path.isdir(v) else 1) "
            "for k, v in p.items()} | {'home_entries': os.listdir(p['home']) if os.path.isdir(p['home']) "
            "else []})); open('w.txt', 'w').write('x')"
        )
        probes = {
            "other": str(gold),
            "home": str(Path.home()),
            "shown": str(shown / "ok.txt"),
            "base_site": str(base_site),
            "venv_site": sysconfig.get_path("purelib"),
        }
        command = sandbox.wrap_command(
            [sys.executable, "-S", "-c", code, json.dumps(probes)],
            visible=[shown, Path(sysconfig.get_path("purelib"))],
            scratch=scratch,
            force=True,
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen["other"] is False and seen["shown"] is True and seen["venv_site"] is True, seen
        # of the home directory only the way to a bound path is there (a pyenv interpreter under ~/.pyenv)
        bound = [
            *sandbox.interpreter_paths(),
            Path(sysconfig.get_path("purelib")),
            *sandbox._covered(),
        ]  # (empty)
        assert all(any(b.is_relative_to(Path.home() / e) for b in bound) for e in seen["home_entries"]), seen[
            "home_entries"
        ]
        if base_site.is_dir() and base_site != Path(sysconfig.get_path("purelib")):
            assert seen["base_site"] is False, seen
        assert (scratch / "w.txt").read_text() == "x"
        assert base_site.resolve() in sandbox.stray_site_dirs([sys.base_prefix], []) or not base_site.is_dir()
        assert sandbox.stray_site_dirs([sys.base_prefix], [base_site]) == []  # on the import path: kept
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_a_sandbox_that_does_not_start_is_an_infrastructure_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bwrap failing to start the harness's process: a `SandboxStartError` (an infrastructure error) that
    names the tool and its message, never a harness failure; a sub-run's log carrying it is recognised."""
    pytest.importorskip("tau2")
    from pytest_ecdysis_tau2.harness_process.agent_process import agent_process, prepare

    harness = tmp_path / "h"
    harness.mkdir()
    (harness / "__init__.py").write_text("def build_agent(**kw):\n    raise RuntimeError\n")
    monkeypatch.setenv(
        "PATH", f"{fake_bwrap(tmp_path, 'bwrap: execvp /x/python: No such file')}:{os.environ['PATH']}"
    )
    monkeypatch.setenv(sandbox.ENV_ON, "1")
    try:
        with pytest.raises(sandbox.SandboxStartError) as caught:
            prepare(harness)
    finally:
        agent_process(harness).close()
    assert isinstance(caught.value, InfrastructureError)
    text = str(caught.value)
    assert "bubblewrap (bwrap)" in text and "execvp /x/python: No such file" in text
    assert sandbox.start_failure(f"E   ... {text}\nmore") == text[text.index(sandbox.START_FAILURE_MARK) :]
    assert sandbox.start_failure("bwrap is mentioned, nothing failed") is None


def test_the_child_environment_is_an_allowlist() -> None:
    """The harness's process gets PATH, locale and Python's own variables, never a key, token or URL,
    whatever its name."""
    from pytest_ecdysis_tau2.harness_process.agent_wire import child_env

    given = {
        "PATH": "/bin",
        "LC_ALL": "C",
        "HOME": "/h",
        "OPENAI_API_KEY": "k",
        "MY_SERVICE_TOKEN": "t",
        "HF_TOKEN": "h",
        "ECDYSIS_SIM_URL": "http://x",
        "DATABASE_URL": "postgres://u:p@h/db",
    }
    assert child_env(given) == {"PATH": "/bin", "LC_ALL": "C", "HOME": "/h"}


def test_limits_name_the_bound() -> None:
    """`exceeded` names the limit and its value for SIGXCPU, for CPU used past the limit and for a
    MemoryError; other endings name none."""
    bound = limits.Limits(memory_mb=512, cpu_s=7)
    assert "--ecdysis-limits agent-cpu: 7 s" in limits.exceeded(bound, exit_code=-24)
    assert "--ecdysis-limits agent-cpu: 7 s" in limits.exceeded(bound, exit_code=-9, cpu_s=7.2)
    assert "--ecdysis-limits agent-memory: 512 MB" in limits.exceeded(bound, raised="MemoryError")
    assert limits.exceeded(bound, exit_code=3, cpu_s=0.4) is None
    assert limits.exceeded(limits.Limits(0, 0), exit_code=-24, raised="MemoryError") is None


def test_verdict_lists_what_only_the_sandbox_stops() -> None:
    """With the sandbox off, the verdict section carries the sandbox line before the exit status."""
    from pytest_ecdysis.report.verdict import verdict_lines

    lines = verdict_lines(
        {},
        evolve=False,
        gate={"passed": True, "headline": "gate PASSED"},
        evolution=None,
        evolution_error=None,
        run_id="r",
        run_path=None,
        exit_status=0,
        sandbox="harness code ran...",
    )
    assert [t for t, _ in lines] == ["gate PASSED", "harness code ran...", "exit status 0 (success)"]
    lines = verdict_lines(
        {},
        evolve=False,
        gate={"passed": True, "headline": "gate PASSED"},
        evolution=None,
        evolution_error=None,
        run_id="r",
        run_path=None,
        exit_status=0,
    )
    assert len(lines) == 2


@pytest.mark.usefixtures("env")
def test_a_gate_run_with_the_sandbox_off_lists_what_only_it_stops(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gate run with `--ecdysis-sandbox off`: its verdict section carries the line naming what harness
    code could reach (ancestors' environments, the network, writes to the venv); with the sandbox on (where
    it can start) the line is absent. The `strict` rule: this 4-task suite at 2 trials is too small for the
    default non-inferiority rule to decide, and the test is about the sandbox line, not the rule."""
    from test_gate_runs import BASE, gate_run, save_baseline

    monkeypatch.setenv(sandbox.ENV_ON, os.environ.get(sandbox.ENV_ON, "0"))  # in-process runs export theirs
    monkeypatch.setenv(sandbox.ENV_WHY, os.environ.get(sandbox.ENV_WHY, ""))
    save_baseline(pytester)
    strict = ("--ecdysis-gate-rule", "strict")
    off = gate_run(pytester, BASE, *strict, "--ecdysis-sandbox", "off")
    off.stdout.fnmatch_lines(
        [
            "*ecdysis verdict*",
            "*harness code ran with your rights (--ecdysis-sandbox off); "
            "only the sandbox stops: *ancestors' environments*the network*writes to the venv*",
            "exit status 0*",
        ]
    )
    if sandbox.probe() is None:
        on = gate_run(pytester, BASE, *strict)
        assert on.ret == 0 and "harness code ran with your rights" not in on.stdout.str()


def test_a_sub_run_whose_sandbox_did_not_start_stops_the_loop_not_the_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A validation sub-run whose log says bubblewrap could not start the harness's process: the sub-run
    raises `SandboxStartError` (an infrastructure error that stops the evolution, resumable) instead of
    `BrokenCandidate` (which would end the round `broken_candidate`)."""
    from pytest_ecdysis.validate import subrun

    said = (
        "E   pytest_ecdysis_tau2.harness_process.agent_wire.SandboxStartError: "
        f"{sandbox.START_FAILURE_MARK}: bwrap: execvp /tmp/venv/bin/python: No such file or directory"
    )
    monkeypatch.setattr(
        subrun, "_run", lambda args, cwd, environ, log, on_start=None: (2, 1.0, f"collecting\n{said}\n")
    )
    harness = tmp_path / "h"
    harness.mkdir()
    (harness / "__init__.py").write_text("def build_agent(**kw):\n    return None\n")
    with pytest.raises(sandbox.SandboxStartError, match="execvp /tmp/venv/bin/python") as caught:
        subrun.run_suite(
            base_args=[],
            cwd=tmp_path,
            harness_dir=harness,
            run_dir=tmp_path / "runs",
            run_id="r",
            sim_url=None,
            check_import=False,
        )
    assert "--ecdysis-sandbox off" in str(caught.value) and not isinstance(
        caught.value, subrun.BrokenCandidate
    )
    monkeypatch.setattr(
        subrun, "_run", lambda args, cwd, environ, log, on_start=None: (2, 1.0, "collecting\n")
    )
    with pytest.raises(subrun.BrokenCandidate):  # without the line: the candidate's sub-run, as before
        subrun.run_suite(
            base_args=[],
            cwd=tmp_path,
            harness_dir=harness,
            run_dir=tmp_path / "runs",
            run_id="r",
            sim_url=None,
            check_import=False,
        )


def test_the_controller_exports_its_decision_limits_and_hidden_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prepare_sandbox` exports the decision, the limits, the session's run directory and the suites' answer
    keys to cover (beside what a parent session covers); `off` puts the verdict line on the state and no
    start line."""
    from types import SimpleNamespace

    from pytest_ecdysis.core.registry import answer_keys
    from pytest_ecdysis.run.controller import prepare_sandbox

    keys = answer_keys()
    assert len(keys) >= 6, keys  # τ²: tasks.json and split_tasks.json of airline, retail, telecom

    for name in (sandbox.ENV_ON, sandbox.ENV_WHY, limits.ENV_MEMORY, limits.ENV_CPU):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv(sandbox.ENV_HIDE, "/parent/runs")
    cfg = SimpleNamespace(sandbox="off", agent_memory_mb=512, agent_cpu_s=30, run_dir=tmp_path / "runs")
    state = SimpleNamespace(messages=[], sandbox_verdict=None)
    prepare_sandbox(cfg, state)
    assert os.environ[sandbox.ENV_ON] == "0" and limits.from_env() == limits.Limits(512, 30)
    assert os.environ[sandbox.ENV_HIDE].split(os.pathsep) == ["/parent/runs", str(tmp_path / "runs"), *keys]
    assert state.messages == [] and "only the sandbox stops" in state.sandbox_verdict
    monkeypatch.setenv(sandbox.ENV_HIDE, "")
    prepare_sandbox(SimpleNamespace(**{**vars(cfg), "run_dir": Path("/")}), state)  # it holds the harness
    assert os.environ[sandbox.ENV_HIDE].split(os.pathsep) == keys
