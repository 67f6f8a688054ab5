"""Scripted attacker harnesses against the sandbox and the bounds, on real τ²
trials: each kind the sandbox alone stops (ancestors' environments, the ground-truth endpoint over the
network, writes into the venv, τ²'s package and the user's cache, τ²'s task files, a directory beside the checkout) and each bound (a 4 GB
allocation, a CPU spin).

Sandbox on (the default, as in CI): a run of the suite with a canary key in its environment; no probe
succeeds, the score is no higher than an idle harness's, the canary is in no file under the run
directory, and the venv, τ²'s package and the cache are byte-identical afterwards. The bounds end the
trial `agent_error` with the limit named, with and without bubblewrap.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sysconfig
import tempfile
from pathlib import Path

import pytest
from suite_scripted import run
from test_sandbox import need_bwrap

pytest.importorskip("tau2")

from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings  # noqa: E402

pytest_plugins = ["pytester"]

CANARY = "sk-ecdysis-canary-" + hashlib.sha256(b"issue 27").hexdigest()[:24]
SETTINGS = EndpointSettings(call_timeout_s=5.0, max_retries=1, trial_budget_s=120.0, backoff_s=0.01)

HARNESS = """
import glob, json, os, pathlib, urllib.request, urllib.error

from tau2.agent.base import BaseAgent
from tau2.data_model.message import AssistantMessage

CANARY, SIM_URL, TARGETS, GOLD, READS = {canary!r}, {sim_url!r}, {targets!r}, {gold!r}, {reads!r}


def probe():
    found = []
    for path in glob.glob("/proc/[0-9]*/environ"):  # every process it can see, its ancestors included
        try:
            data = pathlib.Path(path).read_bytes()
        except OSError:
            continue
        if CANARY.encode() in data:
            found.append(path)
    notes = [{{"kind": "environ", "found": found, "own": CANARY in json.dumps(dict(os.environ)),
              "leak": CANARY if found else ""}}]  # an attacker writes what it found into the evidence
    try:
        with urllib.request.urlopen(SIM_URL + "/ecdysis/ground_truth?trial=x", timeout=3) as reply:
            reached = reply.status
    except urllib.error.HTTPError as exc:  # the server answered: it was reached
        reached = exc.code
    except Exception as exc:
        reached = repr(exc)[:80]
    notes.append({{"kind": "network", "reached": reached}})
    wrote = []
    for target in TARGETS:
        try:
            pathlib.Path(target).parent.mkdir(parents=True, exist_ok=True)
            pathlib.Path(target).write_text("planted")
            wrote.append(target)
        except OSError:
            pass
    notes.append({{"kind": "writes", "wrote": wrote}})
    try:
        gold = len(pathlib.Path(GOLD).read_bytes())
    except OSError:
        gold = -1
    notes.append({{"kind": "gold", "bytes": gold}})
    seen = []
    for target in READS:
        try:
            seen.append([target, pathlib.Path(target).read_text()])
        except OSError:
            pass
    notes.append({{"kind": "reads", "seen": seen}})
    return notes


class Agent(BaseAgent):
    usage = dict()

    def __init__(self):
        self.harness_notes = probe()

    def get_init_state(self, message_history=None):
        return None

    def generate_next_message(self, message, state):
{body}
        return AssistantMessage(role="assistant", content="Done."), state

    def stop(self, message=None, state=None):
        pass

    def set_seed(self, seed):
        pass


def build_agent(**kw):
    return Agent()
"""


def _tau2_root() -> Path:
    import tau2

    return Path(tau2.__file__).resolve().parent


def _harness(
    tmp_path: Path,
    name: str,
    *,
    sim_url: str = "http://127.0.0.1:9",
    targets: list[str] = (),
    body: str = "        pass",
    reads: list[str] = (),
) -> Path:
    gold = _tau2_root().parent / "tau2" / "data" / "tau2" / "domains" / "airline" / "tasks.json"
    harness = tmp_path / name
    harness.mkdir()
    (harness / "__init__.py").write_text(
        HARNESS.format(
            canary=CANARY,
            sim_url=sim_url,
            targets=list(targets),
            gold=str(gold),
            body=body,
            reads=list(reads),
        )
    )
    return harness


def _digest(*roots: Path) -> str:
    """sha256 over every file under `roots`: path, size and bytes (not the suspect-task cache, which the
    trusted trial process itself writes)."""
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(
            p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and "suspect" not in p.name
        ):
            h.update(f"{path}\0{path.stat().st_size}\0".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.slow
def test_attacks_on_a_sandboxed_run(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One τ² trial of the default run (`--ecdysis-sandbox auto`, bubblewrap here) whose harness hunts a
    canary key in every process's environment, fetches the simulated server's ground truth, writes into
    τ²'s package, the venv and the user's cache, and reads τ²'s task file: all fail, the trial scores
    what an idle harness scores, the canary is in no file of the run directory, and the package, the
    plugin's install and the cache are byte-identical afterwards."""
    need_bwrap()
    from pytest_ecdysis.sim.server import start_background

    server = start_background(nonce="tests")
    cache = tmp_path / "cache"
    (cache / "pytest-ecdysis").mkdir(parents=True)
    (cache / "pytest-ecdysis" / "keep.json").write_text("{}")
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pytest-ecdysis"
    for found in user_cache.glob("*suspect*.json"):  # computed once per τ² version: 15-60 s otherwise
        (cache / "pytest-ecdysis" / found.name).write_bytes(found.read_bytes())
    site = Path(sysconfig.get_path("purelib"))
    targets = [
        str(_tau2_root() / "planted.py"),
        str(site / "planted.pth"),
        str(cache / "pytest-ecdysis" / "x.json"),
        str(Path.home() / ".cache" / "pytest-ecdysis" / "planted.json"),
    ]
    # beside the directory that holds the suite (the checkout): another checkout, a sub-run's run directory
    from pytest_ecdysis_tau2 import SUITE_ROOT

    sibling = Path(tempfile.mkdtemp(dir=SUITE_ROOT.parent, prefix="ecdysis-sibling-"))
    (sibling / "secret.txt").write_text("beside the checkout")
    harness = _harness(
        tmp_path,
        "attacker",
        sim_url=server.url.removesuffix("/v1"),
        targets=targets,
        reads=[str(sibling / "secret.txt")],
    )
    protected = [_tau2_root(), cache]
    before = _digest(*protected)
    site_before = sorted(p.name for p in site.iterdir())
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("ECDYSIS_SIM_URL", server.url)
    runs = pytester.path / "runs"
    try:
        result = pytester.runpytest_subprocess(
            "--pyargs",
            "pytest_ecdysis_tau2",
            "-p",
            "no:cacheprovider",
            "-k",
            "airline",
            "--ecdysis-tasks",
            "3",
            "--ecdysis-model",
            "sim",
            "--ecdysis-harness",
            str(harness),
            "--ecdysis-run-dir",
            str(runs),
            timeout=600,
        )
    finally:
        server.stop()
        shutil.rmtree(sibling, ignore_errors=True)
        for target in targets:
            planted = Path(target)
            if planted.exists() and not str(planted).startswith(str(cache)):
                planted.unlink()  # a failed run must not leave the venv changed for the next test
    assert "harness code runs with your rights" not in result.stdout.str()
    (run_dir,) = runs.iterdir()
    (trial,) = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    notes = {n["kind"]: n for n in trial["harness_notes"]}
    assert notes["environ"]["found"] == [] and not notes["environ"]["own"], notes["environ"]
    assert not isinstance(notes["network"]["reached"], int), notes["network"]
    assert notes["writes"]["wrote"] == [], notes["writes"]
    assert notes["gold"]["bytes"] <= 0
    assert notes["reads"]["seen"] == [], notes[
        "reads"
    ]  # the suite root's parent was bound before the suites moved into the package
    assert trial["reward"] == 0.0  # an idle agent on task 3
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert leaked == []
    assert _digest(*protected) == before
    assert sorted(p.name for p in site.iterdir()) == site_before


@pytest.mark.parametrize("sandboxed", [True, False])
def test_a_4_gb_allocation_ends_the_trial_naming_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandboxed: bool
) -> None:
    """A harness that allocates 4 GB: past `--ecdysis-limits agent-memory` (default 4096 MB of address
    space) the allocation fails, and the trial ends agent_error naming the limit and its value; the next
    trial of the same worker runs normally. With and without bubblewrap."""
    if sandboxed:
        need_bwrap()
    monkeypatch.setenv("ECDYSIS_SANDBOX", "1" if sandboxed else "0")
    monkeypatch.delenv(limits_env := "ECDYSIS_AGENT_MEMORY_MB", raising=False)
    assert limits_env not in os.environ
    # (no page is written: were the limit missing, the allocation would succeed without using the memory,
    # and the test fail without harming the machine)
    body = "        block = bytearray(4 << 30)"
    result = run(
        "3", None, harness=_harness(tmp_path, f"alloc{int(sandboxed)}", body=body), settings=SETTINGS
    )
    assert result.termination_reason == "agent_error" and result.reward == 0.0
    assert "--ecdysis-limits agent-memory: 4096 MB" in result.error, result.error
    again = run("3", None, harness=_harness(tmp_path, f"idle{int(sandboxed)}"), settings=SETTINGS)
    assert again.termination_reason in ("user_stop", "agent_stop"), again.error


def test_a_cpu_spin_ends_the_trial_naming_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness that spins past `--ecdysis-limits agent-cpu` (here 2 s): the kernel ends its process (SIGXCPU),
    and the trial ends agent_error naming the limit and its value, long before the trial budget."""
    monkeypatch.setenv("ECDYSIS_SANDBOX", "0")
    monkeypatch.setenv("ECDYSIS_AGENT_CPU_S", "2")
    body = "        while True:\n            pass"
    result = run("3", None, harness=_harness(tmp_path, "spin", body=body), settings=SETTINGS)
    assert result.termination_reason == "agent_error" and result.reward == 0.0
    assert "--ecdysis-limits agent-cpu: 2 s" in result.error, result.error
