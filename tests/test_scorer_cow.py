"""The scorer's copy-on-write path gives τ²'s own rewards: same trajectories, scored by
the suite's scorer process and by τ²'s `evaluate_simulation` with its default environments."""

from __future__ import annotations

import copy
import functools
import json
import os

import pytest
from gold_replay import gold_simulation

from pytest_ecdysis_tau2.scoring import cow_scoring, scorer, scorer_client
from pytest_ecdysis_tau2.tasks import suite
from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2

#: write tasks first, so a mutated "pristine" environment would show in the next trajectory of the task.
SAMPLE = [("airline", "1"), ("retail", "0"), ("airline", "14")]


def _without_last_write(sim: dict) -> dict:
    """The replay with its last tool call (and its result) removed: the DB no longer matches."""
    out = copy.deepcopy(sim)
    msgs = out["messages"]
    last = max(i for i, m in enumerate(msgs) if m.get("tool_calls"))
    del msgs[last : last + 2]
    return out


def _tau2_default(domain: str, task_id: str, sim: dict) -> tuple[float, dict]:
    t = load_tau2()
    info = t.evaluate_simulation(
        simulation=t.SimulationRun.model_validate(sim),
        task=suite.get_task(domain, task_id),
        evaluation_type=t.EvaluationType.ALL,
        solo_mode=False,
        domain=domain,
    )
    comps = {
        scorer.COMPONENTS[k.value.upper()]: float(v)
        for k, v in (info.reward_breakdown or {}).items()
        if k.value.upper() in scorer.COMPONENTS
    }
    return float(info.reward), comps


@pytest.mark.skipif(not cow_scoring.available(), reason="copy-on-write scoring needs os.fork")
def test_scorer_process_rewards_equal_tau2_default_path() -> None:
    """Gold replays (reward 1) and replays missing their last write (reward 0 on DB tasks), scored in turn by
    one scorer process: rewards and components equal τ²'s own path, whatever was scored before (a failing
    replay first: the gold hashes a task's first child records are the gold environment's, not the
    agent's, or the gold replay after it would score 0)."""
    client = scorer_client.ScorerClient()
    try:
        seen = []
        for domain, task_id in SAMPLE:
            gold = gold_simulation(domain, task_id)
            for sim in (_without_last_write(gold), gold, _without_last_write(gold)):
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
    assert cow_scoring.score_in_child("airline", lambda: {"ok": True, "reward": 1.0}) == {
        "ok": True,
        "reward": 1.0,
    }


@pytest.mark.skipif(not cow_scoring.available(), reason="copy-on-write scoring needs os.fork")
def test_the_gold_hash_is_computed_once_per_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a task's first scoring child, later children of the task never hash the gold database again
    (its hash method is made to raise in the parent), and still score 0 and 1 as τ² does."""
    from tau2.registry import registry

    monkeypatch.setattr(registry, "_domains", dict(registry._domains))
    scorer._fast_environments()  # as in the scorer process
    monkeypatch.setattr(cow_scoring, "_GOLD_HASHES", {})
    gold = gold_simulation("airline", "14")
    bad = _without_last_write(gold)

    def run(sim: dict) -> float:
        answer = cow_scoring.score_in_child(
            "airline", functools.partial(scorer.score, "airline", "14", sim), task_id="14"
        )
        assert answer.get("ok"), answer
        return answer["reward"]

    assert run(bad) == _tau2_default("airline", "14", bad)[0] == 0.0
    assert ("airline", "14") in cow_scoring._GOLD_HASHES

    gold_db = cow_scoring._PRISTINE["airline"][1].tools.db
    hashed = cow_scoring.db_hash.db_hash

    def not_again(pieces: object, db: object) -> str:
        if db is gold_db:
            raise RuntimeError("the gold database was hashed again")
        return hashed(pieces, db)

    monkeypatch.setattr(cow_scoring.db_hash, "db_hash", not_again)
    assert (run(gold), run(bad)) == (1.0, 0.0)
