"""The suite's trial runner: endpoint failures end as infrastructure errors within a time budget,
the reward is computed out of the harness's reach, suspect tasks, task selection."""

from __future__ import annotations

import json
import socket

import httpx2
import pytest
from suite_scripted import ScriptedModel, call, run, text

pytest.importorskip("tau2")

from pytest_ecdysis.core.errors import UsageError  # noqa: E402
from pytest_ecdysis_tau2.tasks import suite  # noqa: E402
from pytest_ecdysis_tau2.trial import suspect  # noqa: E402
from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Timed trials below measure the endpoint, not the worker's first imports."""
    from suite_scripted import warm_up

    warm_up()


FAST = EndpointSettings(call_timeout_s=2.0, max_retries=3, trial_budget_s=30.0, backoff_s=0.01)
GOOD = [call("get_reservation_details", json.dumps({"reservation_id": "JMO1MG"})), text("Done.")]


def error_response(status):
    return httpx2.Response(status, json={"error": {"message": f"scripted {status}", "type": "server_error"}})


def test_transient_500_and_429_are_retried_and_the_trial_completes():
    """HTTP 500 and 429 answers are retried (bounded) and do not show in the trial when a retry succeeds."""
    agent = ScriptedModel([error_response(500), error_response(429), *GOOD])
    result = run("3", agent, settings=FAST)
    assert result.termination_reason == "user_stop" and result.error is None
    assert len(agent.requests) == 4


@pytest.mark.parametrize("status", [429, 500, 503])
def test_persistent_http_errors_end_as_infrastructure_error_after_bounded_retries(status):
    """An endpoint that keeps answering 429/5xx ends the trial as infrastructure_error (no reward, not a
    failure) after exactly 1 + max_retries attempts."""
    agent = ScriptedModel([error_response(status)])
    result = run("3", agent, settings=FAST)
    assert result.termination_reason == "infrastructure_error" and result.reward is None
    assert result.is_infra_error and str(status) in result.error
    assert len(agent.requests) == 1 + FAST.max_retries


@pytest.fixture
def silent_endpoint():
    """A server that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()


def test_hanging_endpoint_times_out_per_call_then_is_an_infrastructure_error(silent_endpoint):
    """A hanging endpoint costs at most (1 + retries) x call timeout, then the trial is an infrastructure error."""
    settings = EndpointSettings(call_timeout_s=0.3, max_retries=1, trial_budget_s=20.0, backoff_s=0.01)
    result = run("3", None, settings=settings, base_url=silent_endpoint)
    assert result.termination_reason == "infrastructure_error"
    assert "did not answer" in result.error
    # ended by the call timeouts: two attempts (1 + 1 retry) of 0.3 s, and not by the 20 s trial budget (that
    # would be time_budget_exceeded). Causal, not timed: a bound on wall_s (10 s) also counted the trial's
    # set-up, which took 21 s at load 30
    assert "after 1 retries" in result.error


def test_retries_never_outlast_the_trial_budget(silent_endpoint):
    """With many retries allowed, the total budget still bounds the trial: time_budget_exceeded."""
    import re

    # a budget of 10 s, not 1 s: at load 54 the harness's process did not answer within 1 s (agent_error)
    settings = EndpointSettings(call_timeout_s=1.0, max_retries=50, trial_budget_s=10.0, backoff_s=0.01)
    result = run("3", None, settings=settings, base_url=silent_endpoint)
    assert result.termination_reason == "time_budget_exceeded" and result.reward is None
    # the budget stopped the retries after at most 10 attempts of 1 s, not after 51 (51 s). Counted, not
    # timed: a bound on wall_s also counted the trial's set-up, which a loaded machine stretches
    retries = int(
        re.search(r"time budget of 10 s ran out \(\d+ requests, (\d+) retries\)", result.error).group(1)
    )
    assert retries <= 10, result.error


def test_refused_connection_says_to_check_the_server():
    """A refused connection is an infrastructure error whose message names the endpoint and the fix."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    result = run("3", None, settings=FAST, base_url=f"http://127.0.0.1:{port}/v1")
    assert result.termination_reason == "infrastructure_error"
    assert f"127.0.0.1:{port}" in result.error and "is the server running" in result.error


def test_trial_result_fields_are_filled_and_json_safe():
    """A completed trial fills every TrialResult field the records rely on, as JSON-safe builtins."""
    result = run("3", ScriptedModel(GOOD), settings=FAST)
    data = result.model_dump(mode="json")
    json.dumps(data)
    assert data["suite"] == "tau2-airline" and data["task_id"] == "3" and data["trial"] == 0
    assert set(data["components"]) == {"db", "communicate"} and data["reward"] is not None
    assert data["steps"] == len(data["messages"]) > 0 and data["wall_s"] > 0 and data["model"] == "scripted"
    assert data["messages"][0] == {"role": "assistant", "content": "Hi! How can I help you today?"}
    assert data["tool_calls"][0]["step"] is not None and data["tool_calls"][0]["result"]


def _write_task(domain="airline"):
    writes = ("book_", "cancel_", "update_", "send_", "exchange_", "return_", "modify_")
    for task_id, task in suite.all_tasks(domain).items():
        actions = task.evaluation_criteria.actions or []
        if any(a.name.startswith(writes) for a in actions):
            return task_id
    raise AssertionError("no task with a write")


def test_a_harness_cannot_change_its_reward_by_patching_the_evaluator(tmp_path):
    """The reward comes from the scorer process: a harness that patches τ²'s evaluator and our scorer in
    the trial's process, and does nothing, still gets reward 0 on a task that needs a write."""
    harness = tmp_path / "cheat"
    harness.mkdir()
    (harness / "__init__.py").write_text(
        "import tau2.evaluator.evaluator as ev\n"
        "import pytest_ecdysis_tau2.scoring.scorer as sc\n"
        "from tau2.data_model.simulation import RewardInfo\n"
        "ev.evaluate_simulation = lambda *a, **k: RewardInfo(reward=1.0)\n"
        "sc.score = lambda *a, **k: {'ok': True, 'reward': 1.0, 'components': {}, 'checks': {}}\n"
        "from suite_oracle_harness import OracleAgent\n"
        "class Idle(OracleAgent):\n"
        "    def __init__(self):\n"
        "        self.gold, self.info, self.next = [], [], 0\n"
        "        self.harness_notes, self.usage = [], {}\n"
        "def build_agent(**kw):\n"
        "    return Idle()\n"
    )
    result = run(_write_task(), None, harness=harness, settings=FAST)
    assert result.termination_reason == "user_stop"
    assert result.reward == 0.0 and result.components["db"] == 0.0


def test_a_crashing_harness_is_an_agent_error_not_infrastructure(tmp_path):
    """A harness that raises is the harness's defect: termination agent_error with the exception text."""
    harness = tmp_path / "crash"
    harness.mkdir()
    (harness / "__init__.py").write_text("def build_agent(**kw):\n    raise RuntimeError('boom')\n")
    result = run("3", None, harness=harness, settings=FAST)
    assert result.termination_reason == "agent_error" and result.reward == 0.0 and "boom" in result.error


def test_suspect_tasks_are_those_whose_gold_actions_fail(tmp_path, monkeypatch):
    """Case 7: retail tasks 12, 13 and 64 have gold actions that fail on replay (suspect); airline 3 has none;
    the detection is cached on disk under the tau2 version and read back without recomputing."""
    assert suspect.failing_gold_actions("retail", suite.get_task("retail", "12"))
    assert suspect.failing_gold_actions("retail", suite.get_task("retail", "64"))
    assert suspect.failing_gold_actions("airline", suite.get_task("airline", "3")) == []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    suspect.suspect_tasks.cache_clear()
    calls = []
    monkeypatch.setattr(suspect, "compute", lambda d: calls.append(d) or {"13": [{"index": 0}]})
    monkeypatch.setattr(suspect, "known", lambda version: None)  # a τ² version the suite ships no list for
    monkeypatch.setattr(
        suspect, "verified", lambda domain, listed: True
    )  # (verification: test_trusted_units)
    try:
        assert suspect.is_suspect("retail", "13") and not suspect.is_suspect("retail", "14")
        assert suspect.cache_path("retail").name == f"tau2-{suspect.tau2_version()}-suspect-retail.json"
        suspect.suspect_tasks.cache_clear()
        assert suspect.is_suspect("retail", "13") and calls == ["retail"]
    finally:
        suspect.suspect_tasks.cache_clear()


def test_task_selection_uses_tau2_splits_and_rejects_unknown_ids():
    """Splits come from τ²'s split_tasks.json (airline 30/20, retail 74/40); an unknown id is a usage error
    naming valid ids; an id of the other domain selects nothing here."""
    assert len(suite.split_ids("airline", "train")) == 30 and len(suite.split_ids("airline", "test")) == 20
    assert len(suite.split_ids("retail", "train")) == 74 and len(suite.split_ids("retail", "test")) == 40
    assert len(suite.split_ids("airline", "all")) == 50
    assert suite.select_task_ids("airline", "train", ("3", "72")) == ["3"]
    assert suite.select_task_ids("airline", "train", ("72",)) == []
    with pytest.raises(UsageError, match="9999 is not a τ² task id; valid ids"):
        suite.select_task_ids("airline", "train", ("9999",))
    with pytest.raises(UsageError, match="not in the 'train' split"):
        suite.select_task_ids("airline", "train", ("18",))


def test_records_carry_what_the_model_was_sent_not_only_the_environment_output():
    """A tool result the harness cut before sending is recorded as the model saw it (`model_view`), beside
    τ²'s raw output: diagnosis must see the harness's truncation, which τ²'s trajectory does not show."""
    user_id = "noah_muller_9847"  # a τ² airline user whose details are longer than the 1200-char cut
    agent = ScriptedModel([call("get_user_details", json.dumps({"user_id": user_id})), text("Done.")])
    result = run("3", agent, settings=FAST)
    first = result.tool_calls[0]
    assert first.name == "get_user_details" and not first.error
    assert len(first.result) > 1200
    assert first.model_view is not None and first.model_view != first.result
    assert "[truncated" in first.model_view and first.model_view.startswith(first.result[:1200])
    sent = [m for m in agent.requests[1]["messages"] if m["role"] == "tool"]
    assert sent[0]["content"] == first.model_view
