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

from pytest_ecdysis.diagnose import diagnose
from pytest_ecdysis.errors import UsageError
from pytest_ecdysis.evidence import parse_evidence
from pytest_ecdysis.patterns import group
from pytest_ecdysis.strategies.base import get_strategy


def run(tmp_path, strategy, records, log):
    harness = write_harness(tmp_path)
    return diagnose(records=records, groups=group(records), harness_dir=harness, history=[], solved_tasks=[],
                    cfg=cfg(2), round_dir=tmp_path / "round", strategy=strategy, client=sim_client(log))


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


def test_harnessfix_sees_every_record_ungrouped(tmp_path):
    """harnessfix: one call; each record is its own single-record entry, so no group is cross-task."""
    log = []
    d = run(tmp_path, "harnessfix", id_prefix_records() + incomplete_records(), log)
    groups = evidence_of(log[0][1])["groups"]
    assert len(log) == 1 and len(groups) == 4 and not any(g["cross_task"] for g in groups)
    assert d.spec is not None


def test_self_harness_sees_no_harness_map_or_history(tmp_path):
    """self-harness: one call with groups and examples but no harness map and no history."""
    log = []
    run(tmp_path, "self-harness", id_prefix_records(), log)
    ev = evidence_of(log[0][1])
    assert len(log) == 1 and "harness" not in ev and "history" not in ev and ev["groups"][0]["examples"]


def test_unknown_strategy_is_a_usage_error():
    """An unknown strategy name is a usage error listing the available ones."""
    with pytest.raises(UsageError, match="ecdysis-nofdcr"):
        get_strategy("magic")
