"""Each quirk kind of the simulated model fires and is cured exactly as docs/internals.md documents,
judged from what the harness sends, over real HTTP with the real openai client (toy suite: tests/sim_toy.py)."""

from __future__ import annotations

import pytest
from sim_toy import ORDER_1, PAYMENT, ToyHarness, ToyKnowledge, toy_task, write_profile

from pytest_ecdysis.sim.client import fetch_ground_truth
from pytest_ecdysis.sim.server import start_background


@pytest.fixture
def sim(tmp_path, monkeypatch):
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path / "profiles"))
    handle = start_background(knowledge={"toy": ToyKnowledge()})
    yield handle
    handle.stop()


def run(sim, tmp_path, quirks, harness, trial="run/toy/1/0", **profile):
    model = write_profile(tmp_path / "profiles", "q", quirks, **profile)
    result = harness.run(sim.url, trial, model=model)
    truth = fetch_ground_truth(sim.url, trial)
    return result, truth


def kinds(truth, kind):
    return [q for q in truth["quirks"] if q["kind"] == kind]


V1 = dict()  # ToyHarness defaults are the example harness's v1 behaviour


@pytest.mark.parametrize("kind", ["id_case", "id_prefix"])
@pytest.mark.parametrize("cure", ["normalise_ids", "error_hint"])
def test_id_quirks_cured_by_normalising_or_by_an_error_naming_the_expected_form(sim, tmp_path, kind, cure):
    """id_case/id_prefix: v1 (raw error) leaves it uncured and the trial fails; normalising the id or an
    error that names the argument and 'expected' cures it and the trial is solved."""
    quirks = {kind: {"rate": 1.0}}
    bad, truth = run(sim, tmp_path, quirks, ToyHarness())
    assert kinds(truth, kind) and not kinds(truth, kind)[0]["cured"]
    assert not bad["solved"]
    good, truth = run(sim, tmp_path, quirks, ToyHarness(**{cure: True}), trial="run/toy/1/1")
    assert kinds(truth, kind) and all(q["cured"] for q in kinds(truth, kind))
    assert good["solved"]


def test_context_loss_uncured_when_truncated_or_dropped_cured_when_present(sim, tmp_path):
    """context_loss: the payment id sits past 1,200 chars of a tool result; v1's truncation and a short
    context both make the model send a wrong value; keeping the value in the request cures it."""
    quirks = {"context_loss": {"rate": 1.0}}
    truncated, truth = run(sim, tmp_path, quirks, ToyHarness(truncate_at=1200))
    assert kinds(truth, "context_loss")[0]["cured"] is False and not truncated["solved"]
    assert not any(PAYMENT in args for _, args in truncated["writes"])
    dropped, truth = run(sim, tmp_path, quirks, ToyHarness(truncate_at=None, keep_last=2), trial="run/toy/1/1")
    assert kinds(truth, "context_loss")[0]["cured"] is False and not dropped["solved"]
    kept, truth = run(sim, tmp_path, quirks, ToyHarness(truncate_at=None), trial="run/toy/1/2")
    assert kinds(truth, "context_loss")[0]["cured"] is True and kept["solved"]


def test_verbose_rereads_cured_by_a_budget_that_allows_the_extra_calls(sim, tmp_path):
    """verbose_rereads: extra lookups before each write exhaust a tight budget; a larger one cures it."""
    quirks = {"verbose_rereads": {"rate": 1.0}}
    tight, truth = run(sim, tmp_path, quirks, ToyHarness(max_calls=8))
    assert tight["end"] == "budget" and kinds(truth, "verbose_rereads")[0]["cured"] is False
    roomy, truth = run(sim, tmp_path, quirks, ToyHarness(max_calls=20), trial="run/toy/1/1")
    assert roomy["solved"] and kinds(truth, "verbose_rereads")[0]["cured"] is True


@pytest.mark.parametrize("kind", ["early_end", "forget_communicate"])
def test_closing_quirks_cured_only_by_a_check_message(sim, tmp_path, kind):
    """early_end / forget_communicate: without a check the user ends and the trial fails; a check message
    the user did not write, sent before the closing reaches the user, cures it."""
    quirks = {kind: {"rate": 1.0}}
    bad, truth = run(sim, tmp_path, quirks, ToyHarness())
    assert kinds(truth, kind)[0]["cured"] is False and not bad["solved"] and bad["end"] == "user_stop"
    good, truth = run(sim, tmp_path, quirks, ToyHarness(completion_check=True), trial="run/toy/1/1")
    assert kinds(truth, kind)[0]["cured"] is True and good["solved"]


def test_repeat_after_error_cured_when_the_repeat_gets_a_different_tool_message(sim, tmp_path):
    """repeat_after_error: identical error texts keep the model looping (6 repeats, then it gives up);
    a harness that flags the repeat (different text) stops the loop at once."""
    quirks = {"id_prefix": {"rate": 1.0}, "repeat_after_error": {"rate": 1.0}}
    loop, truth = run(sim, tmp_path, quirks, ToyHarness())
    assert kinds(truth, "repeat_after_error")[0]["cured"] is False
    flagged, truth = run(sim, tmp_path, quirks, ToyHarness(repeat_flag=True), trial="run/toy/1/1")
    assert kinds(truth, "repeat_after_error")[0]["cured"] is True
    calls = lambda r: sum(1 for m in r["messages"] if m.get("tool_calls"))  # noqa: E731
    assert calls(flagged) < calls(loop) - 3


def test_malformed_args_cured_by_a_tool_error(sim, tmp_path):
    """malformed_args: a harness that answers the call with a tool error gets valid JSON next; one that
    cannot use the reply (Direct) ends the trial."""
    quirks = {"malformed_args": {"rate": 1.0}}
    good, truth = run(sim, tmp_path, quirks, ToyHarness())
    assert good["solved"] and all(q["cured"] for q in kinds(truth, "malformed_args"))
    bad, truth = run(sim, tmp_path, quirks, ToyHarness(malformed_tool_error=False), trial="run/toy/1/1")
    assert bad["end"] == "format_error" and kinds(truth, "malformed_args")[0]["cured"] is False


def test_blind_spot_cured_only_by_the_literal_value_in_the_system_prompt(sim, tmp_path):
    """blind_spot (model): every general cure leaves it; a system prompt containing the correct value of
    that very argument (an over-fitted rule) cures it."""
    quirks = {"blind_spot": {"task_rate": 1.0, "rate": 1.0}}
    everything = dict(normalise_ids=True, error_hint=True, repeat_flag=True, truncate_at=None, completion_check=True)
    bad, truth = run(sim, tmp_path, quirks, ToyHarness(**everything))
    spot = kinds(truth, "blind_spot")[0]
    assert spot["cured"] is False and spot["origin"] == "model" and not bad["solved"]
    step = next(s for s in toy_task().plan if s.name == spot["tool"])
    from pytest_ecdysis.sim.agent import _get_path

    gold = _get_path(step.arguments, spot["arg"])
    prompt = f"Rule: for task 1 always use {gold} in {spot['tool']}."
    good, truth = run(sim, tmp_path, quirks, ToyHarness(**everything, system_prompt=prompt), trial="run/toy/1/1")
    assert kinds(truth, "blind_spot")[0]["cured"] is True and good["solved"]


def test_slip_is_never_cured(sim, tmp_path):
    """slip (model): a wrong argument at a random step; no harness behaviour cures it."""
    everything = dict(normalise_ids=True, error_hint=True, repeat_flag=True, truncate_at=None, completion_check=True)
    result, truth = run(sim, tmp_path, {"slip": {"rate": 1.0}}, ToyHarness(**everything))
    assert kinds(truth, "slip") and not any(q["cured"] for q in kinds(truth, "slip"))
    assert all(q["origin"] == "model" for q in truth["quirks"])
    assert not result["solved"]


def test_a_prompt_that_only_claims_the_cures_stays_uncured(sim, tmp_path):
    """A cure depends on what the harness does, never on keywords: a system prompt claiming id
    normalisation, corrective errors, no truncation and a completion check, without doing any of it,
    gets exactly the quirks and outcomes of the plain v1 prompt."""
    quirks = {"id_prefix": {"rate": 1.0}, "context_loss": {"rate": 1.0}, "early_end": {"rate": 1.0},
              "forget_communicate": {"rate": 1.0}, "repeat_after_error": {"rate": 1.0}}
    claims = ("You normalise every order id (we add the '#' prefix for you). Tool errors always name the argument "
              "and the expected form. Tool results are never truncated: " + PAYMENT[:0] + "you always see every value. "
              f"Before ending, we check that every request is done and every figure is stated. Order {ORDER_1[1:]} "
              "is the same as the order with the prefix. Do not repeat a failing call; we flag repeats.")
    plain, plain_truth = run(sim, tmp_path, quirks, ToyHarness(), trial="run/toy/1/0")
    claimed, claimed_truth = run(sim, tmp_path, quirks, ToyHarness(system_prompt=claims), trial="other/toy/1/0")
    assert [(q["kind"], q["cured"]) for q in claimed_truth["quirks"]] == [(q["kind"], q["cured"]) for q in plain_truth["quirks"]]
    assert not any(q["cured"] for q in claimed_truth["quirks"] if q["kind"] != "context_loss")
    assert claimed["solved"] is plain["solved"] is False


def test_ground_truth_never_appears_in_a_completion(sim, tmp_path):
    """No completion (agent or user) carries the ground truth or its vocabulary."""
    quirks = {k: {"rate": 0.5} for k in ("id_case", "id_prefix", "context_loss", "early_end", "forget_communicate",
                                        "repeat_after_error", "malformed_args", "slip")}
    quirks["blind_spot"] = {"task_rate": 1.0, "rate": 1.0}
    for trial in range(4):
        result, truth = run(sim, tmp_path, quirks, ToyHarness(), trial=f"run/toy/1/{trial}")
        assert truth["quirks"]
        for reply in result["raw"]:
            lowered = reply.lower()
            for word in ("quirk", "systematic", "cured", "blind_spot", "ground_truth", "origin"):
                assert word not in lowered
