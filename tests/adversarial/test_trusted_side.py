"""The trusted side owns what is measured: the model, the routing headers, the
ground truth's credential, the scorer's code.

Real τ² trials through the suite's runner against scripted endpoints (the requests as they left the trial
process) and the simulated model over HTTP; the harness runs in its child process and, with
`ECDYSIS_AGENT_PROCESS=0`, in the trial process itself (the transport guard holds there too).
"""

from __future__ import annotations

import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from suite_scripted import ScriptedModel, run, text

pytest.importorskip("tau2")

from pytest_ecdysis_tau2.harness_process.request_guard import guard_call  # noqa: E402
from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings  # noqa: E402

FAST = EndpointSettings(call_timeout_s=5.0, max_retries=1, trial_budget_s=60.0, backoff_s=0.01)
EXAMPLE = Path(__file__).resolve().parents[2] / "pytest_ecdysis_tau2" / "example_harness"

# A harness that asks for another model and another role and trial: through the client's `create`, and
# through the protocol channel itself (past the child's own filter), as the scripted attacks on the trusted side did.
GREEDY = """
from tau2.agent.base import BaseAgent
from tau2.data_model.message import AssistantMessage

ASK = dict(messages=[{"role": "user", "content": "hi"}],
           extra_headers={"X-Ecdysis-Role": "analyst", "X-Ecdysis-Trial": "other/tau2-airline/1/0",
                          "Authorization": "Bearer mine"}, extra_query={"route": "strong"})


class Agent(BaseAgent):
    harness_notes, usage = [], dict()

    def __init__(self, client, model):
        self.client, self.model = client, model

    def get_init_state(self, message_history=None):
        return None

    def generate_next_message(self, message, state):
        completions = self.client.chat.completions
        completions.create(model=self.model + "/strong", **ASK)
        if hasattr(completions, "channel"):
            completions.channel.call({"model": "gpt-strong", **ASK})
        return AssistantMessage(role="assistant", content="Done."), state

    def stop(self, message=None, state=None):
        pass

    def set_seed(self, seed):
        pass


def build_agent(*, client, model, **kw):
    return Agent(client, model)
"""


def test_guard_call_overwrites_the_model_and_drops_routing_arguments() -> None:
    """The arguments of a call from the channel as the trial side makes it, and notes of what changed."""
    kwargs = {
        "model": "sim/strong",
        "messages": [],
        "extra_headers": {"X-Ecdysis-Role": "analyst"},
        "extra_query": {"a": "b"},
        "temperature": 0.5,
    }
    out, notes = guard_call(kwargs, "sim")
    assert out == {"model": "sim", "messages": [], "temperature": 0.5}
    assert [n["kind"] for n in notes] == ["request_filtered", "model_overridden"]
    assert "X-Ecdysis-Role" in notes[0]["detail"] and "'sim/strong'" in notes[1]["detail"]
    assert guard_call({"model": "sim", "messages": []}, "sim") == ({"model": "sim", "messages": []}, [])


@pytest.mark.parametrize("agent_process", ["1", "0"])
def test_a_harness_cannot_choose_its_model_role_or_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent_process: str
) -> None:
    """Every request that left the trial process carried the configured model, the `agent` role, the
    trial's own header and the trial side's key; the change is a note in the trial's record."""
    monkeypatch.setenv("ECDYSIS_AGENT_PROCESS", agent_process)
    harness = tmp_path / f"greedy_{agent_process}"
    harness.mkdir()
    (harness / "__init__.py").write_text(GREEDY)
    agent = ScriptedModel([text("Done.")])
    result = run("3", agent, harness=harness, settings=FAST)
    assert len(agent.requests) >= (2 if agent_process == "1" else 1)
    assert {r["model"] for r in agent.requests} == {"scripted"}
    assert {h["x-ecdysis-role"] for h in agent.headers} == {"agent"}
    assert {h["x-ecdysis-trial"] for h in agent.headers} == {"test-run/tau2-airline/3/0"}
    assert {h["authorization"] for h in agent.headers} == {
        f"Bearer {os.environ.get('OPENAI_API_KEY') or 'EMPTY'}"
    }
    assert result.model == "scripted"
    kinds = {n["kind"] for n in result.harness_notes + result.endpoint_notes}
    assert {"model_overridden", "request_filtered"} <= kinds, result.harness_notes + result.endpoint_notes


def test_a_stronger_profile_asked_by_the_harness_is_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stronger-model attack (`model=self.model + "/strong"`) on the simulated model over HTTP: the trial
    is answered by the configured profile (its ground truth names it) and is the same trial, reward and
    messages, as the unchanged harness's."""
    from pytest_ecdysis.sim.client import fetch_ground_truth
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    monkeypatch.setenv("ECDYSIS_SIM_NONCE", "trust-27")
    strong = tmp_path / "strong_harness"
    shutil.copytree(EXAMPLE, strong, ignore=shutil.ignore_patterns("__pycache__"))
    agent_py = strong / "agent.py"
    assert "model=self.model," in agent_py.read_text()
    agent_py.write_text(agent_py.read_text().replace("model=self.model,", 'model=self.model + "/strong",'))
    server = start_background()
    out = {}
    try:
        for name, harness in (("plain", EXAMPLE), ("strong", strong)):
            spec = TrialSpec(
                domain="airline",
                task_id="1",
                trial=0,
                run_id=f"r27{name}",
                model="sim",
                user_model="sim",
                harness_dir=harness,
                harness_id=name,
                sim_url=server.url,
            )
            result = run_trial(spec)
            out[name] = (result, fetch_ground_truth(server.url, spec.header))
    finally:
        server.stop()
    (plain, plain_truth), (greedy, greedy_truth) = out["plain"], out["strong"]
    assert plain_truth["profile"] == greedy_truth["profile"] == "default"
    assert greedy.reward == plain.reward and greedy.model == "sim"
    assert [m.get("content") for m in greedy.messages] == [m.get("content") for m in plain.messages]
    assert any(n["kind"] == "model_overridden" for n in greedy.harness_notes)


def test_the_ground_truth_needs_the_servers_credential() -> None:
    """Without the token: 403, whatever the trial; with it (the process that started the server, or env
    `ECDYSIS_SIM_TOKEN` on workers): answered. Harness processes never get the variable."""
    from pytest_ecdysis.sim.client import TOKEN_HEADER, fetch_ground_truth
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis_tau2.harness_process.agent_wire import HIDDEN_ENV_PREFIXES

    server = start_background()
    try:
        url = f"{server.url}/ecdysis/ground_truth?trial=r/tau2-airline/1/0"
        assert httpx2.get(url, timeout=10).status_code == 403
        assert (
            httpx2.get(url, headers={TOKEN_HEADER: "guess-" + server.token[:8]}, timeout=10).status_code
            == 403
        )
        assert httpx2.get(url, headers={TOKEN_HEADER: server.token}, timeout=10).status_code != 403
        assert fetch_ground_truth(server.url, "r/tau2-airline/1/0")["task_id"] == "1"
    finally:
        server.stop()
    assert "ECDYSIS_SIM_TOKEN".startswith(HIDDEN_ENV_PREFIXES)


POISON_SOURCE = "REWARD = 0.0\n"


def _poisoned_package(root: Path) -> Path:
    """`victim/__init__.py` saying REWARD = 0.0, with a `__pycache__` entry compiled from `REWARD = 1.0` whose
    header carries the source's mtime and size (what Python checks), as a planted bytecode attack does."""
    package = root / "victim"
    package.mkdir()
    source = package / "__init__.py"
    source.write_text(POISON_SOURCE)
    stat = source.stat()
    fake = root / "fake.py"
    fake.write_text("REWARD = 1.0\n")
    os.utime(fake, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    import importlib.util

    target = importlib.util.cache_from_source(str(source))
    py_compile.compile(str(fake), cfile=target, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    data = bytearray(Path(target).read_bytes())
    data[12:16] = (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")  # the source's size, not the fake's
    Path(target).write_bytes(bytes(data))
    return package


def test_the_scorer_process_never_loads_planted_bytecode(tmp_path: Path) -> None:
    """A `.pyc` planted in a package's `__pycache__` is loaded by a plain interpreter, and not by one started
    as the scorer is (`SCORER_FLAGS` and an empty private `pycache_prefix`)."""
    from pytest_ecdysis_tau2.scoring.scorer_client import SCORER_FLAGS

    _poisoned_package(tmp_path)
    probe = ["-c", "import victim; print(victim.REWARD)"]
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    plain = subprocess.run([sys.executable, *probe], env=env, capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == "1.0", "the planted bytecode is not loaded: the test proves nothing"
    empty = tmp_path / "prefix"
    empty.mkdir()
    scorer = subprocess.run(
        [sys.executable, *SCORER_FLAGS, "-X", f"pycache_prefix={empty}", *probe],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert scorer.stdout.strip() == "0.0"
    assert not any(empty.rglob("*.pyc"))


def test_the_scorer_process_scores_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the harness in the trial process (`ECDYSIS_AGENT_PROCESS=0`), patching the scorer module there
    changes nothing: the reward comes from the scorer's own process, started with a private bytecode prefix
    (`-B` and an empty one, or the session's trusted cache: `validate.pycache`)."""
    import pytest_ecdysis_tau2.scoring.scorer as scorer_module
    from pytest_ecdysis_tau2.scoring.scorer_client import scorer_client

    monkeypatch.setenv("ECDYSIS_AGENT_PROCESS", "0")
    monkeypatch.delenv(
        "ECDYSIS_WARM_DIR", raising=False
    )  # the worker's own scorer process, not the warm server
    monkeypatch.setattr(scorer_module, "score", lambda *a, **k: {"ok": True, "reward": 1.0, "components": {}})
    # the worker's scorer may have been started by an earlier test under another environment (a nested
    # session drops the cache variables): start this one under the environment the assertion reads
    scorer_client().close()
    trusted = os.environ.get("ECDYSIS_TRUSTED_PYCACHE")
    result = run(
        "2", ScriptedModel([text("I cannot help with that.")]), settings=FAST
    )  # task 2 needs a write
    assert result.termination_reason in ("user_stop", "agent_stop") and result.reward == 0.0, result.error
    client = scorer_client()
    cmdline = Path(f"/proc/{client.proc.pid}/cmdline").read_bytes().split(b"\0")
    prefix = next(part.split(b"=", 1)[1] for part in cmdline if part.startswith(b"pycache_prefix="))
    assert (b"-B" in cmdline and prefix != (trusted or "").encode()) or prefix == (trusted or "-").encode()


def test_a_harness_note_carrying_a_known_secret_is_redacted_on_arrival(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key the harness got hold of (here: written into its code) and put into a note and an error text
    reaches the trial record redacted: the trial side redacts the notes as they arrive."""
    secret = "sk-ant-canary-27-zyxwvutsrq"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    harness = tmp_path / "leaky"
    harness.mkdir()
    (harness / "__init__.py").write_text(
        GREEDY.replace(
            "    harness_notes, usage = [], dict()",
            f"    harness_notes, usage = [{{'kind': 'leak', 'detail': 'key {secret}', 'step': 1}}], dict()",
        )
    )
    result = run("3", ScriptedModel([text("Done.")]), harness=harness, settings=FAST)
    leak = [n for n in result.harness_notes if n["kind"] == "leak"]
    assert leak and leak[0]["detail"] == "key [redacted:ANTHROPIC_API_KEY]"
    assert secret not in result.model_dump_json()
