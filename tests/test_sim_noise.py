"""Run-to-run noise of the simulated model: a share of draws depends on a run nonce; with the nonce
fixed, runs are identical whatever their run ids; without it, each run id is its own nonce."""

from __future__ import annotations

import json

import pytest
from sim_toy import ToyHarness, ToyKnowledge, write_profile

from pytest_ecdysis.sim.client import fetch_ground_truth
from pytest_ecdysis.sim.server import start_background

QUIRKS = {
    "id_case": {"rate": 0.5},
    "early_end": {"rate": 0.5},
    "forget_communicate": {"rate": 0.5},
    "repeat_after_error": {"rate": 0.5},
    "slip": {"rate": 0.2},
}


def noisy_profile(tmp_path, noise: float) -> str:
    model = write_profile(tmp_path, "noisy", QUIRKS)
    path = tmp_path / "noisy.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "noise": noise}))
    return model


def outcomes(url: str, model: str, run_id: str, trials: int = 6) -> list[tuple]:
    """(messages, ground truth without its `nonce`) of `trials` trials of toy task 1 under run id `run_id`."""
    out = []
    for trial in range(trials):
        header = f"{run_id}/toy/1/{trial}"
        result = ToyHarness(truncate_at=None).run(url, header, model=model)
        truth = fetch_ground_truth(url, header)
        truth.pop("nonce")  # the nonce the draws used (the run id when none is fixed): not an outcome
        out.append((json.dumps(result["messages"]), json.dumps(truth, sort_keys=True)))
    return out


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path))
    monkeypatch.delenv("ECDYSIS_SIM_NONCE", raising=False)
    return tmp_path


@pytest.mark.parametrize(
    ("nonce", "noise", "same"), [("fixed", 1.0, True), (None, 1.0, False), (None, 0.0, True)]
)
def test_runs_vary_by_nonce_only_where_the_profile_has_noise(profiles, nonce, noise, same):
    """Two runs (run ids `a` and `b`) of the same harness: identical with a fixed nonce or without noise;
    with noise and no fixed nonce (each run id its own nonce), some trial differs."""
    model = noisy_profile(profiles, noise)
    handle = start_background(knowledge={"toy": ToyKnowledge()}, nonce=nonce)
    try:
        first, second = outcomes(handle.url, model, "a"), outcomes(handle.url, model, "b")
    finally:
        handle.stop()
    assert (first == second) is same


def test_the_nonce_is_read_from_the_environment(profiles, monkeypatch):
    """ECDYSIS_SIM_NONCE fixes the nonce of a server started without one (tests and CI set it)."""
    model = noisy_profile(profiles, 1.0)
    monkeypatch.setenv("ECDYSIS_SIM_NONCE", "ci")
    handle = start_background(knowledge={"toy": ToyKnowledge()})
    try:
        assert handle.model.nonce == "ci"
        assert outcomes(handle.url, model, "a", 3) == outcomes(handle.url, model, "b", 3)
    finally:
        handle.stop()


def test_noise_must_be_a_share(profiles):
    """A noise outside [0, 1] is a usage error naming the field."""
    from pytest_ecdysis.core.errors import UsageError
    from pytest_ecdysis.sim.profiles import parse_profile

    with pytest.raises(UsageError, match="'noise' must be a number in \\[0, 1\\]"):
        parse_profile({"name": "x", "seed": 1, "quirks": {}, "noise": 2})


def test_the_nonce_can_flip_every_draw_site(profiles):
    """Noise 0.35, a quirk of rate 0.5: over 40 nonces, the draw of *every* one of 50 trials takes both
    values. The redrawn sites are chosen per nonce, so no site is fixed for all reruns (a share of sites
    chosen once per site would leave about two thirds of the trials the same on every rerun)."""
    from pytest_ecdysis.sim.agent.trial import AgentTrial
    from pytest_ecdysis.sim.profiles import parse_profile

    profile = parse_profile(
        {
            "name": "spot",
            "seed": 7,
            "noise": 0.35,
            "difficulty": {"distribution": "fixed", "value": 0.5},
            "quirks": {"blind_spot": {"task_rate": 1.0, "rate": 0.5}},
        }
    )
    task = ToyKnowledge().task("1")
    fired = [
        {AgentTrial(task, profile, trial, f"r{k}").draws.fires("blind_spot", "trial") for k in range(40)}
        for trial in range(50)
    ]
    assert fired == [{True, False}] * 50
    fixed = [
        {AgentTrial(task, profile, trial, "ci").draws.fires("blind_spot", "trial") for _ in range(3)}
        for trial in range(50)
    ]
    assert all(len(f) == 1 for f in fixed)


def _tau2_trial(url: str, model: str, run_id: str, task_id: str):
    from pathlib import Path

    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    harness = Path(__file__).resolve().parents[1] / "pytest_ecdysis_tau2" / "example_harness"
    return run_trial(
        TrialSpec(
            domain="airline",
            task_id=task_id,
            trial=0,
            run_id=run_id,
            model=model,
            user_model=model,
            harness_dir=harness,
            harness_id="example",
            sim_url=url,
        )
    )


def test_reruns_of_a_real_tau2_task_differ_in_outcome_and_not_with_the_nonce_fixed(monkeypatch):
    """τ² airline task 11 under `sim/noop` (its blind spot fires in most trials), trial 0, the example
    harness: run ids `n1` and `n8` as their own nonces give different rewards (the blind spot fires in
    one rerun only); with the nonce fixed, the same two run ids give identical trials."""
    monkeypatch.setenv("ECDYSIS_AGENT_PROCESS", "0")
    monkeypatch.delenv("ECDYSIS_SIM_NONCE", raising=False)
    fresh = start_background(default_profile="noop")
    fixed = start_background(default_profile="noop", nonce="ci")
    try:
        rewards = {run_id: _tau2_trial(fresh.url, "sim/noop", run_id, "11").reward for run_id in ("n1", "n8")}
        again = [_tau2_trial(fixed.url, "sim/noop", run_id, "11") for run_id in ("n1", "n8")]
    finally:
        fresh.stop()
        fixed.stop()
    assert sorted(rewards.values()) == [0.0, 1.0]
    assert [(r.reward, r.messages) for r in again[:1]] == [(r.reward, r.messages) for r in again[1:]]
