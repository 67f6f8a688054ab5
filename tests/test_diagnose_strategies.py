"""Strategies: what each one sends and returns (self-evolution, harnessfix, self-harness, lookup)."""

from __future__ import annotations

import json

import pytest
from test_diagnose_support import (
    blind_spot_records,
    cfg,
    id_prefix_records,
    incomplete_records,
    sim_client,
    write_harness,
)

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.diagnose.round import diagnose
from pytest_ecdysis.diagnose.strategies.base import get_strategy
from pytest_ecdysis.evidence.build import parse_evidence
from pytest_ecdysis.evidence.patterns import group


def run(tmp_path, strategy, records, log, proposals=None):
    harness = write_harness(tmp_path)
    config = cfg(2)
    if proposals is not None:
        config.proposals = proposals
    return diagnose(
        records=records,
        groups=group(records),
        harness_dir=harness,
        history=[],
        solved_tasks=[],
        cfg=config,
        round_dir=tmp_path / "round",
        strategy=strategy,
        client=sim_client(log),
    )


def evidence_of(body):
    return parse_evidence(body["messages"][1]["content"])


def test_self_evolution_makes_one_call_and_spec_per_failure(tmp_path):
    """self-evolution: one analyst call per failure record, each seeing only that record; specs in order,
    instance-level, all written to specs.json."""
    records = id_prefix_records() + blind_spot_records()
    log = []
    d = run(tmp_path, "self-evolution", records, log)
    assert len(log) == len(records) == 4 and d.instance_level
    assert all(evidence_of(body)["failures"]["n_shown_to_diagnosis"] == 1 for _, body in log)
    assert len(d.specs) == 4 and d.spec == d.specs[0]
    # no aggregation: each blind-spot trial becomes its own over-fitted rule
    assert sum(c.parameters["knob"] == "policy_rule" for s in d.specs for c in s.changes) == 2
    assert len(json.loads((tmp_path / "round" / "specs.json").read_text())["specs"]) == 4


def test_harnessfix_traces_attributes_consolidates_and_scopes(tmp_path):
    """harnessfix: a harness-aware trace per failure, each failure attributed to a step and artifact, flaw
    records across failures, one analyst call per flaw with a scoped operator; one merged candidate,
    regression-aware; traces, flaws and operators kept in the round directory."""
    log = []
    records = id_prefix_records() + incomplete_records() + blind_spot_records()
    d = run(tmp_path, "harnessfix", records, log)
    rdir = tmp_path / "round"
    traces = [json.loads(x) for x in (rdir / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == len(records) == 6
    step = traces[0]["steps"][0]  # the blind-spot write: HAT170 is linked to nothing seen before
    assert "flight_number" in step["unlinked"] and step["artifact"]["file"] == "tools.py"
    flaws = json.loads((rdir / "flaws.json").read_text())
    assert len(flaws["attributions"]) == 6
    assert {f["flaw"]: f["tasks"] for f in flaws["flaws"]} == {
        "premature_end": ["7", "8"],
        "tool_error": ["1", "2"],
        "wrong_write": ["9"],
    }
    ops = json.loads((rdir / "operators.json").read_text())["operators"]
    assert [(o["flaw"], o["operator"], o["may_touch"]) for o in ops] == [
        ("premature_end", "add_check", ["closing.py"]),
        ("tool_error", "add_guard", ["feedback.py", "tools.py"]),
        ("wrong_write", "rewrite_tool_description", ["prompts.py", "tools.py"]),
    ]
    assert len(log) == 3 and all("HarnessFix repair" in body["messages"][1]["content"] for _, body in log)
    assert d.alternatives and d.regression_aware and len(d.specs) == 1
    assert all(
        set(c.files) <= {"closing.py", "feedback.py", "tools.py", "prompts.py"} for c in d.spec.changes
    )


def test_harnessfix_drops_a_repair_outside_its_operator(tmp_path):
    """A change the analyst writes outside the files its operator may touch is dropped and recorded."""
    from pytest_ecdysis.diagnose.strategies.harness_traces import in_scope

    op = {"may_touch": ["config.py"], "creates": False}
    assert in_scope(["config.py"], op) and not in_scope(["prompts.py"], op)
    assert in_scope(
        ["anything.py"], {"may_touch": [], "creates": True}
    )  # Direct: the artifact does not exist


def test_self_harness_proposes_diverse_minimal_modifications(tmp_path):
    """self-harness: one analyst call per mined weakness (three here), each seeing only that weakness; each
    proposal cut to one change; the proposals are alternatives, validated regression-aware."""
    log = []
    d = run(tmp_path, "self-harness", id_prefix_records() + incomplete_records() + blind_spot_records(), log)
    assert len(log) == 3 and d.alternatives and d.regression_aware
    assert [len(evidence_of(body)["groups"]) for _, body in log] == [1, 1, 1]
    assert [len(s.changes) for s in d.specs] == [1, 1, 1]
    assert len({s.changes[0].parameters["knob"] for s in d.specs}) == 3
    rows = json.loads((tmp_path / "round" / "proposals.json").read_text())["proposals"]
    assert [r["proposal"] for r in rows] == [1, 2, 3] and rows[0]["changes_dropped_for_minimality"] == 1
    assert "Already proposed" in log[2][1]["messages"][1]["content"]


def test_self_harness_mines_records_when_groups_are_few(tmp_path):
    """One pattern group of several tasks still gives three weaknesses (the group, then its records); the same
    proposal twice is kept once."""
    from pytest_ecdysis.diagnose.strategies.self_harness import mine_weaknesses

    records = incomplete_records(("7", "8", "9"))
    weak = mine_weaknesses(records, group(records))
    assert len(weak) == 3 and [len(r) for _, r in weak] == [3, 1, 1]
    log = []
    d = run(tmp_path, "self-harness", records, log)
    assert len(log) == 3 and len(d.specs) < 3
    rows = json.loads((tmp_path / "round" / "proposals.json").read_text())["proposals"]
    dup = sum(r["outcome"] == "duplicate" for r in rows)
    assert dup >= 1
    # fewer proposals than asked: the round's line says why (printed by the loop before the proposals run)
    assert d.detail.startswith(
        f"{len(d.specs)} distinct proposal(s) from 3 weakness(es); {dup} answer(s) "
        "repeated an earlier proposal"
    )


def test_self_harness_takes_the_next_change_when_the_first_was_proposed(tmp_path):
    """Two weaknesses of one group (the group, then one of its records) whose analyst answers list the same
    two changes: the second proposal is the change not yet proposed, not a duplicate of the first."""
    records = id_prefix_records()
    log = []
    d = run(tmp_path, "self-harness", records, log, proposals=2)
    rows = json.loads((tmp_path / "round" / "proposals.json").read_text())["proposals"]
    assert len(log) == 2 and [r["outcome"] for r in rows] == ["proposed", "proposed"]
    assert [s.changes[0].parameters["knob"] for s in d.specs] == ["error_feedback", "id_normalisation"]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_self_harness_makes_as_many_proposals_as_asked(tmp_path, n):
    """ecdysis_proposals = N (cfg.proposals): N weaknesses, N analyst calls, at most N proposals; 4 weaknesses
    come from three groups plus a single record of the largest."""
    log = []
    d = run(
        tmp_path,
        "self-harness",
        id_prefix_records() + incomplete_records() + blind_spot_records(),
        log,
        proposals=n,
    )
    weak = json.loads((tmp_path / "round" / "weaknesses.json").read_text())["weaknesses"]
    assert len(log) == len(weak) == n and 1 <= len(d.specs) <= n
    assert "already proposed" not in log[0][1]["messages"][1]["content"].lower()


def test_unknown_strategy_is_a_usage_error():
    """An unknown strategy name is a usage error listing the available ones."""
    with pytest.raises(UsageError, match="ecdysis-nofdcr"):
        get_strategy("magic")
