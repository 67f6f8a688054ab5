"""Metrics, failure records and pattern groups on crafted data (no pytest run inside)."""

from __future__ import annotations

import json

import pytest

from pytest_ecdysis.core import metrics
from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.records import FailureRecord, ToolCallRecord, TrialResult
from pytest_ecdysis.evidence import failures, patterns


def trial(task: str, k: int, reward: float | None, suite: str = "s", **kw) -> TrialResult:
    reason = kw.pop("termination_reason", "user_stop" if reward is not None else "infrastructure_error")
    return TrialResult(suite=suite, task_id=task, trial=k, reward=reward, termination_reason=reason, **kw)


def test_pass_hat_k_matches_hand_computed_values() -> None:
    """pass^k = mean over tasks of C(c,k)/C(n,k): hand-computed for n=4 and c = 4, 3, 2, 0."""
    rewards = {"a": [1, 1, 1, 1], "b": [1, 1, 1, 0], "c": [1, 0, 1, 0], "d": [0, 0, 0, 0]}
    trials = [trial(t, k, float(r)) for t, rs in rewards.items() for k, r in enumerate(rs)]
    counts = metrics.task_counts(trials, 1.0)
    at, hat = metrics.pass_k_table(counts, 4)
    # k=1: (4/4 + 3/4 + 2/4 + 0)/4; k=2: (6/6 + 3/6 + 1/6 + 0)/4; k=3: (1 + 1/4 + 0 + 0)/4; k=4: 1/4
    assert hat == pytest.approx({"1": 2.25 / 4, "2": (1 + 0.5 + 1 / 6) / 4, "3": 1.25 / 4, "4": 0.25})
    # pass@k = 1 - C(n-c,k)/C(n,k): k=1 (1 + 3/4 + 2/4 + 0)/4, k=2 (1 + 1 + (1 - 1/6) + 0)/4
    assert at["1"] == pytest.approx(2.25 / 4)
    assert at["2"] == pytest.approx((2 + 5 / 6) / 4)
    assert at["4"] == pytest.approx(3 / 4)


def test_pass_hat_k_agrees_with_tau2() -> None:
    """Our per-task pass^k equals τ²'s own function on every (n, c, k) up to 5 trials."""
    agent_metrics = pytest.importorskip("tau2.metrics.agent_metrics")
    for n in range(1, 6):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert metrics.pass_hat_k(n, c, k) == pytest.approx(agent_metrics.pass_hat_k(n, c, k))


def test_k_beyond_the_fewest_scored_trials_has_no_value() -> None:
    """A task with an infrastructure error has fewer scored trials: pass^k for larger k is None, not a guess."""
    trials = [trial("a", 0, 1.0), trial("a", 1, 1.0), trial("b", 0, 1.0), trial("b", 1, None)]
    counts = metrics.task_counts(trials, 1.0)
    assert counts["s/b"].infra == 1 and not counts["s/b"].solved
    _, hat = metrics.pass_k_table(counts, 2)
    assert hat == {"1": 1.0, "2": None}


def test_threshold_decides_success() -> None:
    """λ = 0.5: a reward of 0.5 succeeds, 0.49 fails."""
    counts = metrics.task_counts([trial("a", 0, 0.5), trial("b", 0, 0.49)], 0.5)
    assert counts["s/a"].solved and not counts["s/b"].solved


def test_cost_unknown_model_is_none_and_sim_is_zero(tmp_path) -> None:
    """Unknown model -> cost None (not 0); sim -> 0 labelled simulated; a user's table adds models."""
    tokens = {"prompt": 1_000_000, "completion": 500_000, "total": 1_500_000}
    prices = metrics.load_prices()
    cost, note = metrics.cost_usd("my-local-llama", tokens, prices)
    assert cost is None and "my-local-llama" in note
    assert metrics.cost_usd("sim/default", tokens, prices) == (0.0, "simulated")
    (tmp_path / ".ecdysis").mkdir()
    (tmp_path / ".ecdysis" / "prices.json").write_text(
        json.dumps({"models": {"my-local-llama": {"prompt_per_mtok": 1.0, "completion_per_mtok": 2.0}}})
    )
    cost, note = metrics.cost_usd("my-local-llama", tokens, metrics.load_prices(tmp_path))
    assert cost == pytest.approx(1.0 + 1.0) and note == "priced"


def test_cost_counts_the_user_simulator_priced_with_its_own_model() -> None:
    """A real user model spends tokens too: they are summed as `user_tokens` and priced with the user model;
    an unknown user model makes the cost unknown; a simulated user adds nothing."""
    prices = {
        "agent-m": {"prompt_per_mtok": 1.0, "completion_per_mtok": 2.0},
        "user-m": {"prompt_per_mtok": 10.0, "completion_per_mtok": 20.0},
    }
    mtok = {"prompt": 1_000_000, "completion": 1_000_000, "total": 2_000_000}
    trials = [trial("a", 0, 1.0, tokens=mtok, user_tokens=mtok)]
    block = metrics.score_block(
        trials, threshold=1.0, n_trials_cfg=1, model="agent-m", prices=prices, user_model="user-m"
    )
    assert block["user_tokens"] == mtok and block["tokens"] == mtok
    assert block["cost_usd"] == pytest.approx(3.0 + 30.0) and block["cost_note"] == "priced"
    unknown = metrics.score_block(
        trials, threshold=1.0, n_trials_cfg=1, model="agent-m", prices=prices, user_model="other-user"
    )
    assert unknown["cost_usd"] is None and "unknown user model 'other-user'" in unknown["cost_note"]
    simulated_user = metrics.score_block(
        trials, threshold=1.0, n_trials_cfg=1, model="agent-m", prices=prices, user_model="sim"
    )
    assert simulated_user["cost_usd"] == pytest.approx(3.0)
    both_sim = metrics.score_block(
        trials, threshold=1.0, n_trials_cfg=1, model="sim", prices=prices, user_model="sim"
    )
    assert (both_sim["cost_usd"], both_sim["cost_note"]) == (0.0, "simulated")


def test_bad_price_table_is_a_usage_error(tmp_path) -> None:
    """A price file of the wrong shape names the file and the expected shape."""
    (tmp_path / ".ecdysis").mkdir()
    (tmp_path / ".ecdysis" / "prices.json").write_text('{"models": {"x": {"prompt": 1}}}')
    with pytest.raises(UsageError, match="prices.json.*prompt_per_mtok"):
        metrics.load_prices(tmp_path)


def test_failure_record_fields() -> None:
    """A record names failed components, the first tool error, a pending call and a bounded excerpt."""
    msgs = [{"role": "user", "content": "x" * 5000}] + [
        {"role": "assistant", "content": f"m{i}"} for i in range(20)
    ]
    calls = [
        ToolCallRecord(name="get", arguments={}, result="{}", step=2),
        ToolCallRecord(name="book", arguments={"id": "a"}, result="Error: invalid id", error=True, step=10),
        ToolCallRecord(name="cancel", arguments={}, result=None, step=20),
    ]
    t = trial(
        "7",
        1,
        0.0,
        components={"DB": 0.0, "communicate": 1.0, "nl_assertion": 0.5},
        tool_calls=calls,
        messages=msgs,
    )
    (rec,) = failures.triage([t], 1.0).records
    assert rec.failed_components == ["db", "nl_assertion"]
    assert rec.first_tool_error == {
        "name": "book",
        "arguments": {"id": "a"},
        "result": "Error: invalid id",
        "step": 10,
    }
    assert rec.pending_tool_call
    idx = [m["index"] for m in rec.excerpt]
    assert idx == list(range(10 - failures.EXCERPT_BEFORE, 10 + failures.EXCERPT_AFTER + 1))
    t2 = trial("8", 0, 0.0, messages=msgs)
    (rec2,) = failures.triage([t2], 1.0).records
    assert rec2.excerpt[-1]["index"] == 20 and len(rec2.excerpt) <= failures.EXCERPT_BEFORE + 1
    short = failures.excerpt(trial("9", 0, 0.0, messages=msgs[:1]))
    assert len(short[0]["content"]) < 700 and short[0]["content"].endswith("[cut 4400 chars]")


def test_triage_separates_infra_endpoint_and_suspect() -> None:
    """Infra errors are counted not recorded; endpoint_format_error is a flagged record kept out of the
    evidence (the endpoint's defect, not the harness's); suspect is not evidence."""
    trials = [
        trial("1", 0, None),
        trial("2", 0, None, termination_reason="time_budget_exceeded"),
        trial("3", 0, None, termination_reason="endpoint_format_error"),
        trial("4", 0, 0.0, suspect=True),
        trial("5", 0, 1.0),
    ]
    tri = failures.triage(trials, 1.0)
    assert len(tri.infra_errors) == 2 and tri.n_passed == 1
    assert [(r.task_id, r.endpoint_problem, r.suspect) for r in tri.records] == [
        ("3", True, False),
        ("4", False, True),
    ]
    assert [r.kept_out for r in tri.records] == ["endpoint_problem", "suspect"] and tri.evidence == []


def rec(
    task: str,
    k: int = 0,
    reason: str = "user_stop",
    comps: tuple = ("db",),
    err: tuple | None = None,
    suite: str = "s",
    **kw,
) -> FailureRecord:
    fte = {"name": err[0], "arguments": {}, "result": err[1], "step": 1} if err else None
    return FailureRecord(
        suite=suite,
        task_id=task,
        trial=k,
        reward=0.0,
        termination_reason=reason,
        failed_components=list(comps),
        first_tool_error=fte,
        **kw,
    )


def test_grouping_on_crafted_records() -> None:
    """Same signature across tasks -> one cross-task group ranked first; single-task groups stay, after it."""
    records = [
        rec("1", err=("update_reservation", "Error: reservation abc not found")),
        rec("2", err=("update_reservation", "Reservation XYZ not found")),
        rec("2", 1, err=("update_reservation", "Error: reservation q does not exist")),
        rec("3", reason="max_steps", comps=()),
        rec("3", 1, reason="max_steps", comps=()),
        rec("4", comps=("communicate",)),
        rec("5", suspect=True, err=("update_reservation", "not found")),
    ]
    groups = patterns.group(records)
    assert [g.signature for g in groups] == [
        "user_stop|db|update_reservation|not_found",
        "max_steps|none|-|-",
        "user_stop|communicate|-|-",
    ]
    assert [g.cross_task for g in groups] == [True, False, False]
    assert groups[0].tasks == ["s/1", "s/2"] and groups[0].records == ["s/1/t0", "s/2/t0", "s/2/t1"]
    assert groups == patterns.group(list(reversed(records)))  # deterministic whatever the order


def test_pending_call_and_error_classes() -> None:
    """Without a tool error, a pending call names the tool; error texts fall into coarse classes."""
    r = rec(
        "1",
        comps=(),
        pending_tool_call=True,
        tool_calls=[ToolCallRecord(name="get_user", arguments={}, result=None)],
    )
    assert patterns.signature(r) == "user_stop|none|get_user|no_result"
    assert patterns.error_class("Expecting value: line 1 column 1 (char 0) JSON") == "malformed_arguments"
    assert patterns.error_class("Error: order_id must be a string like '#W123'") == "invalid_argument"
    assert patterns.error_class("Error: insufficient balance") == "insufficient"
    assert patterns.error_class("it went sideways") == "other"
