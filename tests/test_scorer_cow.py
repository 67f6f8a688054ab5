"""The scorer's copy-on-write path gives τ²'s own rewards (issue 18 item 3): same trajectories, scored by
the suite's scorer process and by τ²'s `evaluate_simulation` with its default environments."""

from __future__ import annotations

import copy
import json
import os

import pytest
from gold_replay import gold_simulation

from task_suites.tau2 import cow_scoring, scorer, suite
from task_suites.tau2.tau2lib import load_tau2

#: write tasks first, so a mutated "pristine" environment would show in the next trajectory of the task.
SAMPLE = [("airline", "1"), ("retail", "0"), ("airline", "14")]


def _without_last_write(sim: dict) -> dict:
    """The replay with its last tool call (and its result) removed: the DB no longer matches."""
    out = copy.deepcopy(sim)
    msgs = out["messages"]
    last = max(i for i, m in enumerate(msgs) if m.get("tool_calls"))
    del msgs[last:last + 2]
    return out


def _tau2_default(domain: str, task_id: str, sim: dict) -> tuple[float, dict]:
    t = load_tau2()
    info = t.evaluate_simulation(simulation=t.SimulationRun.model_validate(sim), task=suite.get_task(domain, task_id),
                                 evaluation_type=t.EvaluationType.ALL, solo_mode=False, domain=domain)
    comps = {scorer.COMPONENTS[k.value.upper()]: float(v) for k, v in (info.reward_breakdown or {}).items()
             if k.value.upper() in scorer.COMPONENTS}
    return float(info.reward), comps


@pytest.mark.skipif(not cow_scoring.available(), reason="copy-on-write scoring needs os.fork")
def test_scorer_process_rewards_equal_tau2_default_path() -> None:
    """Gold replays (reward 1) and replays missing their last write (reward 0 on DB tasks), scored in turn by
    one scorer process: rewards and components equal τ²'s own path, whatever was scored before."""
    client = scorer.ScorerClient()
    try:
        seen = []
        for domain, task_id in SAMPLE:
            gold = gold_simulation(domain, task_id)
            for sim in (gold, _without_last_write(gold), gold):
                expected = _tau2_default(domain, task_id, sim)
                got = client.score(domain, task_id, json.dumps(sim))
                assert (got["reward"], got["components"]) == expected, (domain, task_id)
                seen.append(expected[0])
        assert 1.0 in seen and 0.0 in seen  # both outcomes were compared
    finally:
        client.close()


@pytest.mark.skipif(not cow_scoring.available(), reason="copy-on-write scoring needs os.fork")
def test_a_failing_or_dying_child_is_an_error_response_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception in the child is `{"ok": false, "error": ...}`; a child that dies without answering too."""
    monkeypatch.setattr(cow_scoring, "prepare", lambda domain: None)

    def boom() -> dict:
        raise ValueError("bad trajectory")

    assert cow_scoring.score_in_child("airline", boom) == {"ok": False, "error": "ValueError: bad trajectory"}
    died = cow_scoring.score_in_child("airline", lambda: os._exit(3))
    assert died["ok"] is False and "without an answer" in died["error"]
    assert cow_scoring.score_in_child("airline", lambda: {"ok": True, "reward": 1.0}) == {"ok": True, "reward": 1.0}
