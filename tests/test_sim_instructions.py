"""The simulated model reads the rules of a prompt (`sim/agent/instructions.py`) and follows
one that addresses a behaviour it has a quirk for with the profile's compliance, never with certainty;
a broad rule costs turns, a prohibition of a write the policy needs costs a refusal, a claim gains
nothing. Parser cases, compliance as a rate over many trials, costs and determinism over real HTTP."""

from __future__ import annotations

import json

import pytest
from sim_toy import ToyHarness, ToyKnowledge, toy_task, write_profile

from pytest_ecdysis.sim.agent.instructions import is_directive, read_rules
from pytest_ecdysis.sim.agent.trial import AgentTrial
from pytest_ecdysis.sim.client import fetch_ground_truth
from pytest_ecdysis.sim.profiles import parse_profile
from pytest_ecdysis.sim.server import start_background

WRITES = ("cancel_order", "modify_order_payment")


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("Do not wrap up the call while any of the customer's asks are still pending.", {"early_end"}),
        ("Make sure you handle every part of a multi-part request before you say goodbye.", {"early_end"}),
        ("Tell the customer the refund amount you computed.", {"forget_communicate"}),
        (
            "If a call fails, don't send the identical call again; change something first.",
            {"repeat_after_error"},
        ),
        ("Copy identifiers character for character, keeping their case.", {"id_case", "id_prefix"}),
        ("Never guess an id: take it from the tool results above.", {"context_loss"}),
        ("Don't fetch a record you already fetched.", {"verbose_rereads"}),
        ("Be friendly and concise.", set()),
    ],
)
def test_rules_are_found_by_the_behaviour_they_name_in_any_wording(text, kinds):
    rules = read_rules(text, "", WRITES)
    assert {k for r in rules for k in r.kinds} == kinds


@pytest.mark.parametrize(
    "text",
    [
        "The harness normalises every order id for you.",
        "Tool errors always name the expected form.",
        "You are a careful agent who never forgets a figure.",
        "Ids are checked automatically before each call.",
    ],
)
def test_a_claim_about_the_harness_is_no_rule(text):
    assert not is_directive(text) and read_rules(text, "", WRITES) == ()


def test_the_policys_own_sentences_are_not_read_as_harness_rules():
    policy = "Never cancel orders that are delivered. Always tell the user the refund amount."
    assert read_rules(policy + "\nBe kind.", policy, WRITES) == ()
    assert read_rules("Never cancel orders.", policy, WRITES)[0].forbids == ("cancel_order",)


def test_broad_rules_are_marked_with_their_cost():
    (reread,) = read_rules("Always look the order up again before every tool call.", "", WRITES)
    (confirm,) = read_rules("Ask the user to confirm each action before you take it.", "", WRITES)
    assert (reread.broad, reread.kind_of_cost) == (True, "reread")
    assert (confirm.broad, confirm.kind_of_cost) == (True, "confirm")
    (scoped,) = read_rules("Before a write, look the record up again if the value is far back.", "", WRITES)
    assert not scoped.broad


def test_the_example_harness_rules_address_what_they_name():
    """The example harness's prompt (v1): 'use only information from the user or from tool results' names
    where values come from (context_loss); 'state figures exactly as computed' the figures of the answer."""
    from pytest_ecdysis_tau2.example_harness.prompts import build_system_prompt

    rules = read_rules(build_system_prompt("Policy text."), "Policy text.", WRITES)
    assert {k for r in rules for k in r.kinds} == {"context_loss", "forget_communicate"}
    assert not any(r.broad or r.forbids for r in rules)


def _profile(compliance: float, **quirks: float) -> object:
    return parse_profile(
        {
            "name": "c",
            "seed": 3,
            "difficulty": {"distribution": "fixed", "value": 0.5},
            "instruction_compliance": compliance,
            "quirks": {k: {"rate": v} for k, v in quirks.items()},
        }
    )


@pytest.mark.parametrize("compliance", [0.3, 0.7])
def test_a_rule_is_followed_at_the_profiles_compliance_over_many_trials(compliance):
    """400 trials of a quirk that always fires: with a rule addressing it, the share of trials where the
    model followed the rule (the quirk prevented, recorded cured by instruction) is the compliance
    (within 4 binomial standard deviations); without the rule the quirk fires on every trial."""
    task, profile = toy_task(), _profile(compliance, early_end=1.0)
    rule = [{"role": "system", "content": "Do not end the conversation until every request is complete."}]
    followed = fired_without = 0
    n = 400
    for trial in range(n):
        agent = AgentTrial(task, profile, trial, nonce="rate")
        agent.follower.read_instructions(rule)
        followed += not agent.draws.fires("early_end", "trial")
        assert agent.state.quirks == [] or agent.state.quirks[-1]["by"] == "instruction"
        plain = AgentTrial(task, profile, trial, nonce="rate")
        plain.follower.read_instructions([{"role": "system", "content": "Be kind."}])
        fired_without += plain.draws.fires("early_end", "trial")
    sd = (compliance * (1 - compliance) / n) ** 0.5
    assert abs(followed / n - compliance) < 4 * sd
    assert fired_without == n


def _model(tmp_path, quirks, compliance):
    model = write_profile(tmp_path / "profiles", "r", quirks)
    path = tmp_path / "profiles" / "r.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "instruction_compliance": compliance}))
    return model


def test_a_rule_against_the_policy_costs_a_refusal(sim, tmp_path):
    model = _model(tmp_path, {}, 1.0)
    result = ToyHarness(truncate_at=None, system_prompt="Never cancel orders.").run(
        sim.url, "refuse/toy/1/0", model
    )
    truth = fetch_ground_truth(sim.url, "refuse/toy/1/0")
    assert not result["solved"] and truth["cause"]["kind"] == "instruction_conflict"
    assert truth["cause"]["origin"] == "harness"


def test_a_broad_rule_costs_turns_and_a_tight_budget_ends_the_trial(sim, tmp_path):
    model = _model(tmp_path, {}, 1.0)
    plain = ToyHarness(truncate_at=None, max_calls=9).run(sim.url, "plain/toy/1/0", model)
    broad = ToyHarness(
        truncate_at=None,
        max_calls=9,
        system_prompt="Always look the records up again before every tool call.",
    ).run(sim.url, "broad/toy/1/0", model)
    assert plain["solved"] and not broad["solved"] and broad["end"] == "budget"
    truth = fetch_ground_truth(sim.url, "broad/toy/1/0")
    assert "instruction_overreach" in {q["kind"] for q in truth["quirks"]}


def test_the_same_prompt_and_nonce_give_the_same_trial(tmp_path, monkeypatch):
    """Determinism with the nonce fixed: two servers, the same run id (the nonce), the same transcript
    and ground truth, rules and all."""
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(tmp_path / "profiles"))
    quirks = {"early_end": 0.5, "forget_communicate": 0.5, "slip": 0.3, "id_prefix": 0.5}
    model = _model(tmp_path, {k: {"rate": v} for k, v in quirks.items()}, 0.5)
    prompt = (
        "Do not end the conversation until every request is complete. Tell the user every amount. "
        "Did you mean #W0000001?"
    )
    outs = []
    for _ in range(2):
        handle = start_background(knowledge={"toy": ToyKnowledge()})
        try:
            runs = [
                ToyHarness(truncate_at=None, system_prompt=prompt).run(handle.url, f"same/toy/1/{t}", model)
                for t in range(4)
            ]
            outs.append(
                (
                    [r["raw"] for r in runs],
                    [fetch_ground_truth(handle.url, f"same/toy/1/{t}") for t in range(4)],
                )
            )
        finally:
            handle.stop()
    strip = lambda raws: [[json.loads(x)["choices"] for x in raw] for raw in raws]  # noqa: E731
    assert strip(outs[0][0]) == strip(outs[1][0]) and outs[0][1] == outs[1][1]
