"""Each quirk kind of the simulated model fires and is cured exactly as docs/internals.md documents,
judged from what the harness sends, over real HTTP with the real openai client (toy suite: tests/sim_toy.py)."""

from __future__ import annotations

import pytest
from sim_toy import ORDER_1, PAYMENT, ToyHarness, toy_task, write_profile

from pytest_ecdysis.sim.client import fetch_ground_truth


def run(sim, tmp_path, quirks, harness, trial="run/toy/1/0", **profile):
    model = write_profile(tmp_path / "profiles", "q", quirks, **profile)
    result = harness.run(sim.url, trial, model=model)
    truth = fetch_ground_truth(sim.url, trial)
    return result, truth


def kinds(truth, kind):
    return [q for q in truth["quirks"] if q["kind"] == kind]


FULL = dict(
    truncate_at=None
)  # v1 without its truncation: the payment id (1,500 chars into a result) stays visible


def order_error_harness(text: str) -> ToyHarness:
    return ToyHarness(truncate_at=None, error_text=text)


@pytest.mark.parametrize("kind", ["id_case", "id_prefix"])
@pytest.mark.parametrize("cure", ["normalise_ids", "error_hint"])
def test_id_quirks_cured_by_normalising_or_by_an_error_showing_the_expected_form(sim, tmp_path, kind, cure):
    """id_case/id_prefix: the raw error leaves it uncured and the trial fails; normalising the id (the
    right record comes back) or an error showing the expected form by example cures it, and the trial
    is solved."""
    quirks = {kind: {"rate": 1.0}}
    bad, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL))
    assert kinds(truth, kind) and not kinds(truth, kind)[0]["cured"]
    assert not bad["solved"] and truth["cause"]["kind"] == kind
    good, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL, **{cure: True}), trial="run/toy/1/1")
    assert kinds(truth, kind) and all(q["cured"] for q in kinds(truth, kind))
    assert good["solved"] and truth["cause"] is None


@pytest.mark.parametrize(
    ("kind", "text", "cured"),
    [
        (
            "id_prefix",
            "Error: order_id expected",
            False,
        ),  # names the argument and says 'expected': no information
        (
            "id_prefix",
            "Error: order not found; ids look like #W0000001",
            True,
        ),  # shows the form, no marker word
        ("id_prefix", "Error: order not found. Order ids start with '#', as the user gave them.", True),
        ("id_prefix", "Error: order not found. Please try again.", False),
        ("id_case", "Error: user_id expected", False),
        ("id_case", "Error: user not found; user ids look like jane_doe_1234", True),
        (
            "id_case",
            "Error: no such user. User ids are lower case.",
            True,
        ),  # the rule, the id visible in the user's words
        ("id_case", "Error: no such user; ids look like #W0000001", False),  # an example of another form
        ("id_case", "Error: no such user. User ids are upper case.", False),  # a rule the right value breaks
    ],
)
def test_an_id_quirk_is_cured_by_the_information_in_the_error_not_by_keywords(
    sim, tmp_path, kind, text, cured
):
    """The cure holds when the error lets the model recover the expected form (an example, or the rule
    while the right value is visible), whatever words it uses; a marker without information does not."""
    result, truth = run(sim, tmp_path, {kind: {"rate": 1.0}}, order_error_harness(text))
    entry = kinds(truth, kind)[0]
    assert entry["cured"] is cured
    if (
        kind == "id_prefix"
    ):  # (the case habit also bends the order ids, which a user-id error says nothing of)
        assert result["solved"] is cured


def test_a_normalising_harness_that_hides_the_error_does_not_count_as_a_cure(sim, tmp_path):
    """A result that does not look like an error but lacks the record asked for is no cure (the model
    carries on; here only a lookup was bent, so the trial still passes)."""
    _, truth = run(sim, tmp_path, {"id_prefix": {"rate": 1.0}}, order_error_harness("OK"))
    assert kinds(truth, "id_prefix") and not any(q["cured"] for q in kinds(truth, "id_prefix"))


def test_a_schema_showing_the_id_form_lowers_the_habit_by_content(sim, tmp_path):
    """The tool schemas are read: a parameter description with an example of the id's form lowers the
    id habit's rate by the profile's documented_format_factor (0 here: it never fires); a description
    without the form leaves it."""

    def schema(description):
        return [
            {
                "type": "function",
                "function": {
                    "name": n,
                    "description": "",
                    "parameters": {
                        "type": "object",
                        "properties": {"order_id": {"type": "string", "description": description}},
                    },
                },
            }
            for n in ("get_order_details", "modify_order_payment", "cancel_order")
        ]

    model = write_profile(tmp_path / "profiles", "doc", {"id_prefix": {"rate": 1.0}})
    import json

    data = json.loads((tmp_path / "profiles" / "doc.json").read_text())
    (tmp_path / "profiles" / "doc.json").write_text(json.dumps({**data, "documented_format_factor": 0.0}))
    plain = ToyHarness(**FULL, tools=schema("The order id.")).run(sim.url, "run/toy/1/0", model=model)
    documented = ToyHarness(**FULL, tools=schema("The order id, such as '#W0000000'.")).run(
        sim.url, "run/toy/1/1", model=model
    )
    assert kinds(fetch_ground_truth(sim.url, "run/toy/1/0"), "id_prefix") and not plain["solved"]
    assert not kinds(fetch_ground_truth(sim.url, "run/toy/1/1"), "id_prefix") and documented["solved"]


def test_a_value_cut_from_a_tool_result_fails_the_trial_and_the_ground_truth_says_why(sim, tmp_path):
    """No quirk at all: the payment id sits 1,480 characters into a result. Cut at 1,200 characters the
    model cannot send it (a wrong value, the trial fails, `unseen_value` why `cut`, the cause); dropped
    from a short context, why `dropped`; kept, the trial is solved with no entry."""
    cut, truth = run(sim, tmp_path, {}, ToyHarness(truncate_at=1200))
    entry = kinds(truth, "unseen_value")[0]
    assert (entry["arg"], entry["why"], entry["origin"], entry["effect"]) == (
        "payment_method_id",
        "cut",
        "harness",
        "wrong_write",
    )
    assert not cut["solved"] and not any(PAYMENT in args for _, args in cut["writes"])
    assert truth["cause"] == {"kind": "unseen_value", "origin": "harness", "entry": 0}
    dropped, truth = run(sim, tmp_path, {}, ToyHarness(truncate_at=None, keep_last=2), trial="run/toy/1/1")
    assert "dropped" in {q["why"] for q in kinds(truth, "unseen_value")} and not dropped["solved"]
    kept, truth = run(sim, tmp_path, {}, ToyHarness(**FULL), trial="run/toy/1/2")
    assert kept["solved"] and truth["quirks"] == [] and truth["cause"] is None


def test_context_loss_fires_only_for_a_visible_value_too_far_back(sim, tmp_path):
    """context_loss: the value is in the request but further back than the profile's recall_chars: the
    model sends a wrong value; within reach it does not fire."""
    import json

    for recall, trial, fires in ((50, "run/toy/1/0", True), (100000, "run/toy/1/1", False)):
        write_profile(tmp_path / "profiles", "far", {"context_loss": {"rate": 1.0}})
        path = tmp_path / "profiles" / "far.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "recall_chars": recall}))
        result = ToyHarness(**FULL).run(sim.url, trial, model="sim/far")
        entries = kinds(fetch_ground_truth(sim.url, trial), "context_loss")
        assert bool(entries) is fires and result["solved"] is not fires
        if fires:
            assert entries[0]["distance_chars"] > 50 and not entries[0]["cured"]


def test_verbose_rereads_cured_by_a_budget_that_allows_the_extra_calls(sim, tmp_path):
    """verbose_rereads: extra lookups before each write exhaust a tight budget (the harness's limit is
    the cause); a larger one cures it."""
    quirks = {"verbose_rereads": {"rate": 1.0}}
    tight, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL, max_calls=8))
    assert tight["end"] == "budget" and kinds(truth, "verbose_rereads")[0]["cured"] is False
    assert truth["cause"]["kind"] == "harness_limit"
    roomy, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL, max_calls=20), trial="run/toy/1/1")
    assert roomy["solved"] and kinds(truth, "verbose_rereads")[0]["cured"] is True


@pytest.mark.parametrize("kind", ["early_end", "forget_communicate"])
def test_closing_quirks_cured_only_by_a_check_message(sim, tmp_path, kind):
    """early_end / forget_communicate: without a check the user ends and the trial fails; a check message
    the user did not write, sent before the closing reaches the user, cures it."""
    quirks = {kind: {"rate": 1.0}}
    bad, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL))
    assert kinds(truth, kind)[0]["cured"] is False and not bad["solved"] and bad["end"] == "user_stop"
    assert truth["cause"]["kind"] == kind
    good, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL, completion_check=True), trial="run/toy/1/1")
    assert kinds(truth, kind)[0]["cured"] is True and good["solved"]


def test_repeat_after_error_cured_when_the_repeat_gets_a_different_tool_message(sim, tmp_path):
    """repeat_after_error: identical error texts keep the model looping (6 repeats, then it gives up);
    a harness that flags the repeat (different text) stops the loop at once."""
    quirks = {"id_prefix": {"rate": 1.0}, "repeat_after_error": {"rate": 1.0}}
    loop, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL))
    assert kinds(truth, "repeat_after_error")[0]["cured"] is False
    flagged, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL, repeat_flag=True), trial="run/toy/1/1")
    assert kinds(truth, "repeat_after_error")[0]["cured"] is True
    calls = lambda r: sum(1 for m in r["messages"] if m.get("tool_calls"))  # noqa: E731
    assert calls(flagged) < calls(loop) - 3


def test_malformed_args_cured_by_a_tool_error(sim, tmp_path):
    """malformed_args: a harness that answers the call with a tool error gets valid JSON next; one that
    cannot use the reply (Direct) ends the trial."""
    quirks = {"malformed_args": {"rate": 1.0}}
    good, truth = run(sim, tmp_path, quirks, ToyHarness(**FULL))
    assert good["solved"] and all(q["cured"] for q in kinds(truth, "malformed_args"))
    bad, truth = run(
        sim, tmp_path, quirks, ToyHarness(**FULL, malformed_tool_error=False), trial="run/toy/1/1"
    )
    assert bad["end"] == "format_error" and kinds(truth, "malformed_args")[0]["cured"] is False


def test_blind_spot_cured_only_by_the_literal_value_in_the_system_prompt(sim, tmp_path):
    """blind_spot (model): every general cure leaves it; a system prompt containing the correct value of
    that very argument (an over-fitted rule) cures it."""
    quirks = {"blind_spot": {"task_rate": 1.0, "rate": 1.0}}
    everything = dict(
        normalise_ids=True, error_hint=True, repeat_flag=True, truncate_at=None, completion_check=True
    )
    bad, truth = run(sim, tmp_path, quirks, ToyHarness(**everything))
    spot = kinds(truth, "blind_spot")[0]
    assert spot["cured"] is False and spot["origin"] == "model" and not bad["solved"]
    step = next(s for s in toy_task().plan if s.name == spot["tool"])
    from pytest_ecdysis.sim.values import _get_path

    gold = _get_path(step.arguments, spot["arg"])
    prompt = f"Rule: for task 1 always use {gold} in {spot['tool']}."
    good, truth = run(
        sim, tmp_path, quirks, ToyHarness(**everything, system_prompt=prompt), trial="run/toy/1/1"
    )
    assert kinds(truth, "blind_spot")[0]["cured"] is True and good["solved"]


def test_slip_is_never_cured(sim, tmp_path):
    """slip (model): a wrong argument at a random step; no harness behaviour cures it."""
    everything = dict(
        normalise_ids=True, error_hint=True, repeat_flag=True, truncate_at=None, completion_check=True
    )
    result, truth = run(sim, tmp_path, {"slip": {"rate": 1.0}}, ToyHarness(**everything))
    assert kinds(truth, "slip") and not any(q["cured"] for q in kinds(truth, "slip"))
    # a slip in a lookup leaves later values unobtained: those entries point back to it, the cause is the slip
    for q in truth["quirks"]:
        assert q["origin"] == "model" or truth["quirks"][q["because"]]["kind"] == "slip"
    assert not result["solved"] and truth["cause"]["origin"] == "model"


def test_a_prompt_that_only_claims_the_cures_stays_uncured(sim, tmp_path):
    """A cure depends on what the harness does, never on keywords: a system prompt claiming id
    normalisation, corrective errors, no truncation and a completion check, without doing any of it
    (declaratives, no rule addressed to the model: sim/agent/instructions.py), gets exactly the quirks and
    outcomes of the plain v1 prompt."""
    quirks = {
        "id_prefix": {"rate": 1.0},
        "early_end": {"rate": 1.0},
        "forget_communicate": {"rate": 1.0},
        "repeat_after_error": {"rate": 1.0},
    }
    # (no value and no form in it: a prompt that *states* the '#' rule informs the model: test_sim_channels.py)
    claims = (
        "You normalise every order id (we fix the form for you). Tool errors always name the argument "
        "and the expected form. Tool results are never truncated: "
        + PAYMENT[:0]
        + "you always see every value. "
        f"Before ending, we check that every request is done and every figure is stated. Order {ORDER_1[1:]} "
        "is the same as the order with the prefix. Repeats of a failing call are flagged for you."
    )
    plain, plain_truth = run(sim, tmp_path, quirks, ToyHarness(), trial="run/toy/1/0")
    claimed, claimed_truth = run(
        sim, tmp_path, quirks, ToyHarness(system_prompt=claims), trial="other/toy/1/0"
    )
    assert [(q["kind"], q["cured"]) for q in claimed_truth["quirks"]] == [
        (q["kind"], q["cured"]) for q in plain_truth["quirks"]
    ]
    assert not any(q["cured"] for q in claimed_truth["quirks"])
    assert claimed["solved"] is plain["solved"] is False


def test_ground_truth_never_appears_in_a_completion(sim, tmp_path):
    """No completion (agent or user) carries the ground truth or its vocabulary."""
    quirks = {
        k: {"rate": 0.5}
        for k in (
            "id_case",
            "id_prefix",
            "context_loss",
            "early_end",
            "forget_communicate",
            "repeat_after_error",
            "malformed_args",
            "slip",
        )
    }
    quirks["blind_spot"] = {"task_rate": 1.0, "rate": 1.0}
    for trial in range(4):
        result, truth = run(sim, tmp_path, quirks, ToyHarness(), trial=f"run/toy/1/{trial}")
        assert truth["quirks"]
        for reply in result["raw"]:
            lowered = reply.lower()
            for word in ("quirk", "systematic", "cured", "blind_spot", "ground_truth", "origin"):
                assert word not in lowered
