"""Causes by replay (`sim/truth/replay.py`): the quirk whose replay with it switched off passes caused the
failure; the harness's limit or a value it withheld when no single quirk does."""

from __future__ import annotations

from pathlib import Path

from pytest_ecdysis.sim.truth.replay import fired_kinds, replay_cause

EXAMPLE = Path(__file__).resolve().parents[1] / "pytest_ecdysis_tau2" / "example_harness"


def truth(*kinds: str, closed: bool = True) -> dict:
    from pytest_ecdysis.sim.profiles import GROUND_TRUTH_ORIGINS

    return {"closed": closed, "quirks": [{"kind": k, "origin": GROUND_TRUTH_ORIGINS[k]} for k in kinds]}


def scripted(passes_with: set[frozenset[str]]):
    calls = []

    def replay(off: frozenset[str]) -> float:
        calls.append(off)
        return 1.0 if off in passes_with else 0.0

    return replay, calls


def test_the_cause_is_the_quirk_whose_replay_without_it_passes():
    """id_case fired first, but only the replay without the blind spot passes: the blind spot caused it
    (a rule picking the first damaging entry would name id_case)."""
    replay, calls = scripted({frozenset({"blind_spot"})})
    found = replay_cause(truth("id_case", "unseen_value", "blind_spot", "id_case"), replay)
    assert found["cause"] == {"kind": "blind_spot", "origin": "model"} and found["by"] == "replay"
    assert calls == [frozenset(), frozenset({"id_case"}), frozenset({"blind_spot"})]
    assert found["sufficient"] == ["blind_spot"] and found["reproduced"]


def test_without_a_single_quirk_the_harness_limit_or_a_withheld_value_is_the_cause():
    replay, _ = scripted(set())
    assert replay_cause(truth("verbose_rereads", closed=False), replay)["cause"]["kind"] == "harness_limit"
    assert replay_cause(truth("slip", "unseen_value"), replay)["by"] == "harness"
    joint, _ = scripted({frozenset({"slip", "early_end"})})
    assert replay_cause(truth("slip", "early_end"), joint)["by"] == "joint"
    assert replay_cause(truth("slip", "early_end"), replay)["cause"] is None


def test_a_replay_that_does_not_fail_again_names_no_cause():
    replay, calls = scripted({frozenset()})
    found = replay_cause(truth("slip"), replay)
    assert found["by"] == "not_reproduced" and found["cause"] is None and calls == [frozenset()]


def test_fired_kinds_are_profile_quirks_in_order():
    assert fired_kinds(truth("unseen_value", "slip", "blind_spot", "slip", "harness_limit")) == [
        "slip",
        "blind_spot",
    ]


def test_a_real_tau2_failure_replayed_without_its_blind_spot_passes(monkeypatch):
    """τ² airline task 11 under `sim/noop`, run id `n1` (its own nonce): the blind spot fires and the
    trial fails; replayed through the server's replay path with the original nonce, it fails again with
    nothing off and passes with the blind spot off."""
    from pytest_ecdysis.sim.client import fetch_ground_truth
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    monkeypatch.setenv("ECDYSIS_AGENT_PROCESS", "0")
    monkeypatch.delenv("ECDYSIS_SIM_NONCE", raising=False)
    handle = start_background(default_profile="noop")

    def trial(run_id: str):
        spec = TrialSpec(
            domain="airline",
            task_id="11",
            trial=0,
            run_id=run_id,
            model="sim/noop",
            user_model="sim/noop",
            harness_dir=EXAMPLE,
            harness_id="example",
            sim_url=handle.url,
        )
        return spec, run_trial(spec)

    try:
        spec, result = trial("n1")
        ground = fetch_ground_truth(handle.url, spec.header)
        assert result.reward == 0.0 and ground["nonce"] == "n1"
        assert "blind_spot" in fired_kinds(ground)

        def replay(off: frozenset[str]) -> float | None:
            run_id = "replay-" + "-".join(sorted(off))
            handle.model.replay(run_id, nonce=ground["nonce"], off=off)
            return trial(run_id)[1].reward

        found = replay_cause(ground, replay)
    finally:
        handle.stop()
    assert found["reproduced"] and found["replays"]["none"] == 0.0
    assert (
        found["cause"] == {"kind": "blind_spot", "origin": "model"} and found["replays"]["blind_spot"] == 1.0
    )
