"""The session's warm scorer server: started only by a top session's controller with the
sandbox on, used by its workers and its sub-runs' workers, same rewards as a worker's own scorer, a
fallback when it is gone, out of reach of harness processes, never shared with a nested session."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from gold_replay import gold_simulation
from test_scorer_cow import _without_last_write

from pytest_ecdysis.validate import sandbox, warm
from pytest_ecdysis_tau2.scoring import scorer_client, warm_scorer

pytest.importorskip("tau2")


def need_bwrap() -> None:
    if sandbox.probe() is not None:
        pytest.skip(f"no sandbox here: {sandbox.probe()}")


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A warm scorer server in a private directory, as the controller starts it, with its log."""
    directory = tmp_path / "warm"
    directory.mkdir(mode=0o700)
    log = tmp_path / "server.log"
    monkeypatch.setenv("ECDYSIS_SCORER_SERVER_LOG", str(log))
    monkeypatch.setenv("ECDYSIS_SANDBOX", "1")
    monkeypatch.setenv(warm.ENV_DIR, str(directory))
    monkeypatch.setattr(scorer_client.ScorerClient, "_fallback_said", False)
    proc = warm_scorer.start(str(directory))
    proc.log = log
    proc.directory = directory
    yield proc
    if proc.poll() is None:
        proc.stdin.close()
        proc.wait(timeout=20)


def _log(proc: subprocess.Popen) -> list[str]:
    return proc.log.read_text().splitlines() if proc.log.exists() else []


def test_rewards_equal_with_and_without_the_server(server: subprocess.Popen) -> None:
    """Gold replays (reward 1) and replays missing their last write (reward 0), scored through the server
    by two successive clients (the second reuses the gold hashes the first's scorer sent back) and by a
    worker's own scorer process: same rewards, components and checks."""
    cases = [
        (d, t, sim)
        for d, t in (("airline", "1"), ("retail", "0"), ("airline", "14"))
        for sim in (_without_last_write(gold_simulation(d, t)), gold_simulation(d, t))
    ]
    results = {}
    for name in ("warm 1", "warm 2", "own"):
        client = scorer_client.ScorerClient()
        if name == "own":
            os.environ.pop(warm.ENV_DIR)
        try:
            results[name] = [client.score(d, t, json.dumps(sim)) for d, t, sim in cases]
            assert (client.conn is not None) == name.startswith("warm") and (client.proc is None) == (
                name != "own"
            )
        finally:
            client.close()
    assert results["warm 1"] == results["warm 2"] == results["own"]
    assert [r["reward"] for r in results["own"]][1::2] == [1.0] * 3 and 0.0 in [
        r["reward"] for r in results["own"]
    ]
    lines = _log(server)
    assert sum(" connection " in line for line in lines) == 2, lines
    assert {line.split(" ", 2)[2] for line in lines if " gold " in line} == {
        "airline 1",
        "retail 0",
        "airline 14",
    }


def test_a_server_that_is_gone_falls_back_once_with_the_right_reward(
    server: subprocess.Popen, capfd: pytest.CaptureFixture[str]
) -> None:
    """The server's scorer killed between two requests, then the server itself: the client scores on its
    own process, says so once on stderr, and the rewards stay right."""
    sim = json.dumps(gold_simulation("airline", "1"))
    client = scorer_client.ScorerClient()
    try:
        assert client.score("airline", "1", sim)["reward"] == 1.0 and client.conn is not None
        child = int(next(line.split()[2] for line in _log(server) if " connection " in line))
        os.kill(child, signal.SIGKILL)
        assert client.score("airline", "1", sim)["reward"] == 1.0  # the same trajectory, on its own process
        assert client.conn is None and client.proc is not None
    finally:
        client.close()
    server.kill()
    server.wait(timeout=20)
    other = scorer_client.ScorerClient()  # a new worker: the socket refuses (the server is dead)
    try:
        assert other.score("airline", "1", sim)["reward"] == 1.0 and other.proc is not None
    finally:
        other.close()
    said = [line for line in capfd.readouterr().err.splitlines() if "warm scorer server" in line]
    assert len(said) == 1 and "starts its own scorer process" in said[0], said


def test_the_server_exits_with_its_controller_and_removes_its_directory(server: subprocess.Popen) -> None:
    client = scorer_client.ScorerClient()
    client.start("airline")
    server.stdin.close()  # the controller's end of the pipe: closed (or the controller died)
    assert server.wait(timeout=30) == 0
    assert not server.directory.exists()
    client.close()


def test_no_server_without_the_sandbox_and_none_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`validate.warm.prepare`: off drops an inherited directory and starts nothing; an inherited directory
    not marked a sub-run's is dropped and a new one made (its socket bound before export); a sub-run's is
    kept; `sandbox off` at the controller exports nothing."""
    from types import SimpleNamespace

    from pytest_ecdysis.run.controller import prepare_sandbox
    from pytest_ecdysis.validate import limits

    for name in (
        sandbox.ENV_ON,
        sandbox.ENV_WHY,
        sandbox.ENV_HIDE,
        limits.ENV_MEMORY,
        limits.ENV_CPU,
        "ECDYSIS_TRUSTED_PYCACHE",
        "ECDYSIS_TRUSTED_PYCACHE_WRITE",
    ):
        monkeypatch.setenv(name, "")
    outer = tmp_path / "outer"
    outer.mkdir()
    monkeypatch.setenv(warm.ENV_DIR, str(outer))
    monkeypatch.setenv(warm.ENV_SUBRUN, "1")
    assert warm.prepare(False) is None and warm.ENV_DIR not in os.environ
    cfg = SimpleNamespace(sandbox="off", agent_memory_mb=512, agent_cpu_s=30, run_dir=tmp_path / "runs")
    monkeypatch.setenv(warm.ENV_DIR, str(outer))
    prepare_sandbox(cfg, SimpleNamespace(messages=[], sandbox_verdict=None))
    assert warm.ENV_DIR not in os.environ and not list(outer.iterdir())
    monkeypatch.setenv(warm.ENV_DIR, str(outer))
    monkeypatch.setenv(warm.ENV_SUBRUN, "1")
    assert warm.prepare(True) == outer and os.environ[warm.ENV_DIR] == str(outer)  # a sub-run's: kept
    monkeypatch.setenv(warm.ENV_DIR, str(outer))
    monkeypatch.delenv(warm.ENV_SUBRUN)
    try:
        made = warm.prepare(True)  # another session's: not used; this one's own, with the τ² suite's server
        assert made is not None and made != outer and oct(made.stat().st_mode & 0o777) == "0o700"
        assert (made / scorer_client.SOCKET_NAME).is_socket() and os.environ[warm.ENV_DIR] == str(made)
    finally:
        warm.stop()
    assert not made.exists() and warm.ENV_DIR not in os.environ


def test_a_harness_process_cannot_reach_the_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the harness's sandbox (the controller lists the warm directory in `ECDYSIS_SANDBOX_HIDE`) the
    socket is not there, and no network namespace of the host is shared."""
    need_bwrap()
    directory = tmp_path / "warm"
    directory.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(directory / "scorer.sock"))
    listener.listen(1)
    monkeypatch.setenv(sandbox.ENV_HIDE, str(directory))
    probe = (
        "import socket,sys; s=socket.socket(socket.AF_UNIX)\n"
        f"try: s.connect({str(directory / 'scorer.sock')!r}); print('connected')\n"
        "except OSError as e: print('refused', e)"
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = subprocess.run(
        sandbox.wrap_command([sys.executable, "-c", probe], visible=[], scratch=scratch, force=True),
        capture_output=True,
        text=True,
        timeout=60,
    )
    listener.close()
    assert done.stdout.startswith("refused"), (done.stdout, done.stderr)


@pytest.mark.parametrize("writable_tmp", [False, True], ids=["default", "tmp-writable"])
def test_the_editor_cannot_reach_the_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writable_tmp: bool
) -> None:
    """The controller lists its warm directory in `ECDYSIS_SANDBOX_HIDE`, which the editor's sandbox covers
    (`edit.contain.editor_sandbox`): an editor cannot connect to the scorer server, also when the user made
    the whole temporary directory writable to it (`--ecdysis-editor-writable /tmp`)."""
    need_bwrap()
    from types import SimpleNamespace

    from pytest_ecdysis.edit.contain import editor_sandbox
    from pytest_ecdysis.run.controller import prepare_sandbox
    from pytest_ecdysis.validate import limits

    for name in (
        sandbox.ENV_ON,
        sandbox.ENV_WHY,
        sandbox.ENV_HIDE,
        limits.ENV_MEMORY,
        limits.ENV_CPU,
        "ECDYSIS_TRUSTED_PYCACHE",
        "ECDYSIS_TRUSTED_PYCACHE_WRITE",
        warm.ENV_DIR,
        warm.ENV_SUBRUN,
    ):
        monkeypatch.setenv(name, "")
    cfg = SimpleNamespace(sandbox="on", agent_memory_mb=512, agent_cpu_s=30, run_dir=tmp_path / "runs")
    try:
        prepare_sandbox(cfg, SimpleNamespace(messages=[], sandbox_verdict=None))
        directory = Path(os.environ[warm.ENV_DIR])  # under the system's temporary directory, not the editor's
        assert directory in sandbox.hidden_paths() and (directory / scorer_client.SOCKET_NAME).is_socket()
        worktree, scratch = tmp_path / "wt", tmp_path / "scratch"
        worktree.mkdir()
        scratch.mkdir()
        probe = (
            "import socket; s=socket.socket(socket.AF_UNIX)\n"
            f"try: s.connect({str(directory / scorer_client.SOCKET_NAME)!r}); print('connected')\n"
            "except OSError as e: print('refused', e)"
        )
        outside = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        writable = (tempfile.gettempdir(),) if writable_tmp else ()
        done = subprocess.run(
            [*editor_sandbox(worktree, scratch, writable), sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        warm.stop()
    assert outside.stdout.startswith("connected"), outside  # the probe itself can tell
    assert done.stdout.startswith("refused"), (done.stdout, done.stderr)


def _suite_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ECDYSIS_", "PYTEST_"))}
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        ECDYSIS_SIM_NONCE="tests",
        ECDYSIS_FULL_ORACLE="0",
        ECDYSIS_SCORER_SERVER_LOG=str(tmp_path / "server.log"),
        **extra,
    )
    return env


def _run_suite(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "pytest_ecdysis_tau2.test_airline",
            "-q",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            "--ecdysis-model",
            "sim",
            "--ecdysis-harness",
            "example_harness",
            "--ecdysis-tasks",
            "0,1",
            "--ecdysis-sandbox",
            "on",
            "--ecdysis-run-dir",
            str(tmp_path / "runs"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _trials(tmp_path: Path) -> list[dict]:
    files = list((tmp_path / "runs").rglob("trials.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_session_and_a_sub_run_score_through_one_warm_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real `pytest -n 2` of two airline tasks (simulated model, sandbox on): its controller's server
    serves both workers (one connection each, no scorer process of their own); a session given that
    directory as a sub-run's (`ECDYSIS_WARM_SUBRUN=1`) uses the same server: its workers' connections
    land in the same log, from the same server process, and its scorers reuse the gold hashes."""
    need_bwrap()
    done = _run_suite(tmp_path, _suite_env(tmp_path))
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    lines = (tmp_path / "server.log").read_text().splitlines()
    connections = [line for line in lines if " connection " in line]
    assert len(connections) == 2 and all(line.endswith(" airline") for line in connections), lines
    assert sorted(line.split()[-1] for line in lines if " gold " in line) == ["0", "1"], lines
    assert len(_trials(tmp_path)) == 2 and all(t.get("reward") is not None for t in _trials(tmp_path))
    assert "warm scorer server" not in done.stderr
    # a sub-run: the evolution's server, kept (here: one started by this test, as a controller does)
    directory = tmp_path / "warm"
    directory.mkdir(mode=0o700)
    (tmp_path / "server.log").unlink()
    monkeypatch.setenv("ECDYSIS_SCORER_SERVER_LOG", str(tmp_path / "server.log"))
    proc = warm_scorer.start(str(directory))
    proc_env = _suite_env(tmp_path, ECDYSIS_WARM_DIR=str(directory), ECDYSIS_WARM_SUBRUN="1")
    try:
        (tmp_path / "runs").rename(tmp_path / "runs-first")
        done = _run_suite(tmp_path, proc_env)
        assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    lines = (tmp_path / "server.log").read_text().splitlines()
    assert [line.split()[0] for line in lines if " connection " in line] == [str(proc.pid)] * 2, lines
    assert not directory.exists()


def test_a_nested_session_does_not_use_the_outer_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytest session started inside another session's process tree (its `ECDYSIS_SESSION_PID` is the
    outer controller's) drops the outer warm directory, even one marked a sub-run's, and makes its own."""
    need_bwrap()
    outer = pytester.path / "outer"
    outer.mkdir()
    monkeypatch.setenv("ECDYSIS_SESSION_PID", "1")
    monkeypatch.setenv(warm.ENV_DIR, str(outer))
    monkeypatch.setenv(warm.ENV_SUBRUN, "1")
    pytester.makepyfile(
        test_inner="import os\ndef test_dir():\n    print('WARM=' + os.environ.get('ECDYSIS_WARM_DIR', ''))\n"
    )
    result = pytester.runpytest_subprocess(
        "-s", "-p", "no:cacheprovider", "--ecdysis-sandbox", "on", "--ecdysis-harness", "example_harness"
    )
    said = [line for line in result.outlines if line.startswith("WARM=") or "WARM=" in line]
    assert said and str(outer) not in said[0] and "ecdysis-warm-" in said[0], result.outlines[-20:]
    time.sleep(0.2)
    assert not Path(said[0].split("WARM=", 1)[1].strip(". ")).exists()  # removed at the inner session's exit


def test_the_server_writes_no_bytecode_after_the_evolution_froze_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The evolution checks the session's bytecode cache against its state at the loop's start
    (`TrustedRuns.check_integrity`): a server told `freeze` before its first connection (a resumed
    evolution's, say) imports τ² without writing a file there; one not told fills it, as the scorers did."""
    from pytest_ecdysis.validate import pycache

    sim = json.dumps(gold_simulation("airline", "1"))
    monkeypatch.setenv("ECDYSIS_SANDBOX", "1")
    monkeypatch.setattr(scorer_client.ScorerClient, "_fallback_said", False)
    written = {}

    def logged(what: str) -> None:
        deadline = time.monotonic() + 60
        while not (log.exists() and any(line.endswith(f" {what}") for line in log.read_text().splitlines())):
            assert time.monotonic() < deadline, f"the server never logged {what!r}"
            time.sleep(0.05)

    for frozen in (True, False):
        cache, directory = tmp_path / f"cache-{frozen}", tmp_path / f"warm-{frozen}"
        cache.mkdir()
        directory.mkdir(mode=0o700)
        monkeypatch.setenv(pycache.ENV_DIR, str(cache))
        monkeypatch.setenv(pycache.ENV_WRITE, "1")
        monkeypatch.setenv(warm.ENV_DIR, str(directory))
        log = tmp_path / f"server-{frozen}.log"
        monkeypatch.setenv("ECDYSIS_SCORER_SERVER_LOG", str(log))
        proc = warm_scorer.start(str(directory))
        logged("serving")  # its own modules are in the cache now (before any evolution starts)
        if frozen:
            proc.stdin.write(b"freeze\n")
            proc.stdin.flush()
            logged("frozen")
        before = pycache.digests(cache)
        client = scorer_client.ScorerClient()
        try:
            assert client.score("airline", "1", sim)["reward"] == 1.0 and client.conn is not None
        finally:
            client.close()
            proc.stdin.close()
            proc.wait(timeout=30)
        written[frozen] = pycache.changes(before, pycache.digests(cache), limit=1000)
    assert written[True] == [] and len(written[False]) > 100, written
