"""The harness's agent behind the process boundary: what harness code does in its child
process cannot reach the reward, the trial record or the classification of an ending.

Real τ² trials through the suite's runner, scripted endpoints (no network): an infrastructure error is
what the trial side saw on the wire; a harness that raises a timeout itself, hangs, dies or prints is an
agent failure with a clear text, and the next trial works.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from suite_scripted import ORACLE_HARNESS, ScriptedModel, call, run, text
from test_suite_runner import _write_task

pytest.importorskip("tau2")

from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings  # noqa: E402

FAST = EndpointSettings(call_timeout_s=2.0, max_retries=1, trial_budget_s=20.0, backoff_s=0.01)
GOOD = [call("get_reservation_details", json.dumps({"reservation_id": "JMO1MG"})), text("Done.")]

IDLE = """
from tau2.agent.base import BaseAgent
from tau2.data_model.message import AssistantMessage


class Agent(BaseAgent):
    harness_notes, usage = [], dict()

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
{setup}
    return Agent()
"""


def _harness(tmp_path: Path, name: str, body: str = "        pass", setup: str = "    pass") -> Path:
    harness = tmp_path / name
    harness.mkdir()
    (harness / "__init__.py").write_text(IDLE.format(body=body, setup=setup))
    return harness


def test_a_timeout_the_endpoint_never_had_is_an_agent_failure(tmp_path: Path) -> None:
    """A harness that raises the client's timeout error (or an InfrastructureError) on a healthy endpoint
    does not leave the denominator: the trial ends agent_error with reward 0."""
    body = (
        "        import httpx, openai\n"
        "        raise openai.APITimeoutError(request=httpx.Request('POST', 'http://x'))"
    )
    result = run("3", ScriptedModel(GOOD), harness=_harness(tmp_path, "fake_timeout", body), settings=FAST)
    assert result.termination_reason == "agent_error" and result.reward == 0.0
    assert "no endpoint failure was seen" in result.error
    body = (
        "        from pytest_ecdysis.core.errors import InfrastructureError\n"
        "        raise InfrastructureError('the endpoint is down, honest')"
    )
    result = run("3", ScriptedModel(GOOD), harness=_harness(tmp_path, "fake_infra", body), settings=FAST)
    assert result.termination_reason == "agent_error" and result.reward == 0.0


def test_a_real_endpoint_failure_is_still_infrastructure() -> None:
    """The example harness on an endpoint answering 503: infrastructure_error, as before the boundary."""
    import httpx2

    failing = ScriptedModel([httpx2.Response(503, json={"error": {"message": "down"}})])
    result = run("3", failing, settings=FAST)
    assert result.termination_reason == "infrastructure_error" and result.reward is None


def test_hanging_dying_and_printing_harnesses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness that hangs is ended at the trial budget, one that dies is named with its exit status (both
    agent_error), one that prints to stdout does not break the protocol; the next trial runs normally."""
    from pytest_ecdysis_tau2.harness_process.agent_process import agent_process

    harness = _harness(tmp_path, "hang", "        import time\n        time.sleep(3600)")
    agent_process(harness).connect("airline").close()  # its server up (τ², the harness, the domain) first
    started = time.monotonic()
    hang = run("3", None, harness=harness, settings=FAST)
    assert hang.termination_reason == "agent_error" and "did not answer" in hang.error
    assert time.monotonic() - started < FAST.trial_budget_s + 60  # the budget, plus a loaded machine's slack
    die = run(
        "3", None, harness=_harness(tmp_path, "die", "        import os\n        os._exit(3)"), settings=FAST
    )
    assert die.termination_reason == "agent_error" and "exit status 3" in die.error
    body = "        import os\n        print('hello', flush=True)\n        os.write(1, b'not json\\n')"
    loud = run("3", None, harness=_harness(tmp_path, "loud", body), settings=FAST)
    assert loud.termination_reason in ("user_stop", "agent_stop"), loud.error
    monkeypatch.setenv("ECDYSIS_SANDBOX", "0")  # the oracle reads τ²'s gold data: not in the sandbox
    again = run("3", None, harness=ORACLE_HARNESS, settings=FAST)
    assert again.reward == 1.0


def test_trials_in_flight_have_processes_of_their_own(tmp_path: Path) -> None:
    """Two trials at once in one worker (as with --ecdysis-concurrency): the harness hangs in one of them
    (task 5; it sets a class attribute, module state of its own process) and ends that trial agent_error
    at the budget; the trial beside it sees neither the hang nor the attribute and ends normally, long
    before."""
    import threading

    setup = "    Agent.hang = '/5/' in kw['client'].default_headers['X-Ecdysis-Trial']"
    body = "        import time\n        while getattr(Agent, 'hang', False):\n            time.sleep(1)"
    harness = _harness(tmp_path, "hang_on_5", body, setup)
    run("3", None, harness=harness, settings=FAST)  # warm: the harness's server, the scorer, τ²'s data
    results, walls = {}, {}

    def one(task: str) -> None:
        started = time.monotonic()
        results[task] = run(task, None, harness=harness, settings=FAST)
        walls[task] = time.monotonic() - started

    threads = [threading.Thread(target=one, args=(task,)) for task in ("5", "3")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results["5"].termination_reason == "agent_error" and "did not answer" in results["5"].error
    assert results["3"].termination_reason in ("user_stop", "agent_stop"), results["3"].error
    assert walls["3"] < walls["5"]


def test_harness_code_cannot_reach_the_reward_or_the_record(tmp_path: Path) -> None:
    """From `build_agent`, a harness wraps the scorer client to return 1.0, patches the plugin's
    `record_trial`, and points PYTHONPATH at a `sitecustomize.py` it ships: all of it happens in its own
    process, so an idle agent on a task that needs a write still scores 0."""
    setup = (
        "    import os, pathlib, sys\n"
        "    import pytest_ecdysis_tau2.scoring.scorer_client as sc, pytest_ecdysis.plugin as pl\n"
        "    sc.ScorerClient.score = lambda self, *a, **k: {'ok': True, 'reward': 1.0, 'components': {}}\n"
        "    pl.record_trial = lambda item, result: None\n"
        "    d = pathlib.Path(os.getcwd()) / 'site'\n"
        "    d.mkdir(exist_ok=True)\n"
        "    (d / 'sitecustomize.py').write_text('import pytest_ecdysis_tau2.scoring.scorer as s\\n"
        's.score = lambda *a, **k: {"ok": True, "reward": 1.0, "components": {}}\\n\')\n'
        "    os.environ['PYTHONPATH'] = str(d)"
    )
    from pytest_ecdysis_tau2.scoring.scorer_client import scorer_client

    scorer_client().close()  # the next trial starts a fresh scorer process (after the harness ran)
    task = _write_task()
    result = run(task, None, harness=_harness(tmp_path, "cheat", setup=setup), settings=FAST)
    assert result.termination_reason in ("user_stop", "agent_stop")
    assert result.reward == 0.0
    assert run(task, None, harness=_harness(tmp_path, "idle"), settings=FAST).reward == 0.0


SNOOP = """    import pathlib, socket
    from tau2.utils.utils import DATA_DIR
    tasks = pathlib.Path(DATA_DIR) / "tau2" / "domains" / "airline" / "tasks.json"
    try:
        n = len(tasks.read_bytes())
    except OSError:
        n = -1
    Agent.harness_notes = [{{"kind": "tasks_bytes", "n": n}}]
    try:
        socket.create_connection(("127.0.0.1", {port}), 2).close()
        Agent.harness_notes.append({{"kind": "network", "ok": True}})
    except OSError:
        Agent.harness_notes.append({{"kind": "network", "ok": False}})"""


@pytest.mark.parametrize("sandboxed", [False, True])
def test_the_sandbox_hides_gold_data_and_the_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandboxed: bool
) -> None:
    """Under `--ecdysis-sandbox` (bubblewrap) the harness's process cannot read τ²'s task file and cannot
    open a connection to a port this process listens on; without it, it can (its user's rights)."""
    import shutil
    import socket

    if sandboxed and not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed")
    monkeypatch.setenv("ECDYSIS_SANDBOX", "1" if sandboxed else "0")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    setup = SNOOP.format(port=listener.getsockname()[1])
    result = run("3", None, harness=_harness(tmp_path, f"snoop{int(sandboxed)}", setup=setup), settings=FAST)
    listener.close()
    seen = {n["kind"]: n for n in result.harness_notes}
    assert (seen["tasks_bytes"]["n"] <= 0) is sandboxed, result.error  # empty or unreadable
    assert seen["network"]["ok"] is not sandboxed


PTRACE_PARENT = (
    "        import ctypes, os\n"
    "        libc = ctypes.CDLL(None, use_errno=True)\n"
    "        dumpable = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE\n"
    "        attached = libc.ptrace(16, os.getppid(), 0, 0) == 0  # PTRACE_ATTACH to the fork server\n"
    "        if attached:\n"
    "            libc.ptrace(17, os.getppid(), 0, 0)  # PTRACE_DETACH\n"
    "        if dumpable or attached:\n"
    "            raise RuntimeError(f'dumpable={dumpable} attached={attached}')"
)


def test_a_trial_cannot_ptrace_its_fork_server(tmp_path: Path) -> None:
    """The fork server is non-dumpable (`limits.protect_this_process` after its trusted imports), and so is
    every trial process it forks: under the sandbox a trial's harness code cannot attach to the server with
    ptrace (and reach the other trials it serves) nor read its memory through /proc."""
    from pytest_ecdysis.validate import sandbox

    if not sandbox.enabled():
        pytest.skip("the sandbox is off: as root a process may ptrace anything")
    result = run("3", None, harness=_harness(tmp_path, "ptrace_parent", PTRACE_PARENT), settings=FAST)
    assert result.termination_reason in ("user_stop", "agent_stop"), result.error
