"""evidence.py: what the roles see, its size bound, exclusions, labels and the failure-aware selection."""

from __future__ import annotations

import json

from test_diagnose_support import (
    agent,
    budget_records,
    call,
    id_prefix_records,
    incomplete_records,
    rec,
    truncation_records,
    user,
    write_harness,
)

from pytest_ecdysis.core.records import ModificationSpec, PatternGroup
from pytest_ecdysis.evidence.build import (
    build_evidence,
    extract_json,
    parse_evidence,
    parse_turns,
    render_turn,
)
from pytest_ecdysis.evidence.context import harness_map
from pytest_ecdysis.evidence.patterns import group
from pytest_ecdysis.evidence.views import cut, record_key, select_records


def many_failures(n: int):
    out = []
    pool = [
        tuple(
            call(
                f"tool_{(i + j) % 37}",
                {"order_id": f"#W{i}", "note": "z" * 500},
                "r" * 700,
                error=(j % 3 == 0),
                step=j,
            )
            for j in range(20)
        )
        for i in range(37)
    ]
    for i in range(n):
        calls = pool[i % 37]
        out.append(
            rec(
                str(i % 500),
                trial=i // 500,
                reason=["user_stop", "agent_stop", "too_many_errors"][i % 3],
                calls=calls,
                excerpt=tuple(user("u" * 700) for _ in range(14)),
            )
        )
    return out


def test_evidence_is_bounded_for_10000_failures():
    """10,000 failures with long histories still give evidence under the character bound."""
    records = many_failures(10_000)
    groups = [
        PatternGroup(
            signature=f"sig{k}",
            cross_task=True,
            tasks=sorted({r.task_id for r in members}),
            records=[record_key(r) for r in members],
        )
        for k in range(100)
        for members in [records[k::100]]
    ]
    ev = build_evidence(records=records, groups=groups, harness_dir=None, max_chars=60_000)
    text = ev.render()
    assert len(text) < 62_000
    assert ev.data["failures"]["n_records"] == 10_000
    assert any(g.get("examples") for g in ev.data["groups"])  # still real evidence, not only counts


def test_one_huge_record_is_cut_head_and_tail_keeping_truncation_markers():
    """Long tool results are cut in the middle so the harness's `[truncated N chars]` marker stays."""
    records = truncation_records(("3",))
    records[0].tool_calls[0].result = "{" + "y" * 50_000 + "… [truncated 800 chars]"
    ev = build_evidence(records=records, groups=group(records), harness_dir=None)
    text = ev.render()
    assert "[truncated 800 chars]" in text and "chars cut ..." in text and len(text) < 10_000


def test_examples_carry_tool_calls_and_excerpts():
    """Groups carry example records with tool-call arguments, results, errors and conversation excerpts."""
    records = id_prefix_records()
    ev = build_evidence(records=records, groups=group(records), harness_dir=None)
    example = ev.data["groups"][0]["examples"][0]
    assert example["tool_calls"][0]["arguments"] == {"order_id": "W100001"}
    assert (
        example["tool_calls"][0]["result"] == "Error: Order not found" and example["tool_calls"][0]["error"]
    )
    assert example["excerpt"][0] == {"role": "user", "content": "My order number is #W100001."}


def test_suspect_and_infrastructure_records_never_appear():
    """Records of suspect tasks and infrastructure errors are not in the evidence, not even as counts of tasks."""
    records = id_prefix_records() + [
        rec("SUSPECT42", suspect=True),
        rec("INFRA77", reason="infrastructure_error"),
    ]
    ev = build_evidence(records=records, groups=group(records), harness_dir=None)
    text = ev.render()
    assert "SUSPECT42" not in text and "INFRA77" not in text
    assert ev.data["failures"]["excluded"] == {
        "suspect": 1,
        "infrastructure": 1,
        "endpoint_problem": 0,
        "user_stop_after_confirmation": 0,
    }


def test_endpoint_problems_and_confirmation_stops_are_not_evidence():
    """Records of endpoint defects (endpoint_format_error, tool calls written as text) and of a user stop
    right after a confirmation request are left out of the evidence and counted by reason: they are no fault of the harness."""
    records = [
        rec("5", reason="endpoint_format_error"),
        rec("6").model_copy(update={"endpoint_problem": True}),
        rec("7").model_copy(update={"user_stop_after_confirmation": True}),
        rec("8"),
    ]
    ev = build_evidence(records=records, groups=group(records), harness_dir=None)
    assert [e["task_id"] for g in ev.data["groups"] for e in g["examples"]] == ["8"]
    assert ev.data["failures"]["excluded"]["endpoint_problem"] == 2
    assert ev.data["failures"]["excluded"]["user_stop_after_confirmation"] == 1


def test_cross_task_groups_rank_first():
    """A cross-task group ranks above a single-task group with more records."""
    single = [rec("9", trial=i, reason="agent_stop", failed=("communicate",)) for i in range(5)]
    records = single + incomplete_records()
    ev = build_evidence(records=records, groups=group(records), harness_dir=None)
    assert [g["cross_task"] for g in ev.data["groups"]] == [True, False]


def test_failure_aware_selection_prefers_new_paths_and_tasks():
    """failure-aware:N keeps N records, covering distinct execution paths before repeating one."""
    repeats = [rec(str(t), reason="user_stop") for t in range(10)]  # one path, ten tasks
    others = id_prefix_records(("20",)) + budget_records(("30",)) + truncation_records(("40",))
    chosen = select_records(repeats + others, 4)
    assert len(chosen) == 4
    assert {r.task_id for r in chosen} >= {"20", "30", "40"}
    ev = build_evidence(records=repeats + others, groups=group(repeats + others), harness_dir=None, limit=4)
    assert (
        ev.data["failures"]["n_shown_to_diagnosis"] == 4
        and ev.data["failures"]["selection"] == "failure-aware:4"
    )
    assert select_records(repeats, None) == sorted(repeats, key=lambda r: (r.suite, r.task_id, r.trial))


def test_harness_map_lists_files_functions_and_settings(tmp_path):
    """The harness map gives each file's functions and UPPER_CASE settings, parsed without importing."""
    h = write_harness(tmp_path)
    (h / "broken.py").write_text("def (:\n")
    files = {f["path"]: f for f in harness_map(h)["files"]}
    assert files["config.py"]["settings"] == {
        "MAX_MODEL_CALLS": 20,
        "MAX_TOOL_RESULT_CHARS": 1200,
        "KEEP_LAST_MESSAGES": 40,
    }
    assert files["feedback.py"]["functions"][0].startswith("format_tool_result(name, args, content, error)")
    assert "parse_error" in files["broken.py"]


def test_history_shows_outcome_and_score_change():
    """Earlier rounds appear with their spec's changes, outcome and score change."""
    spec = ModificationSpec(
        summary="s",
        changes=[
            {
                "component": "trajectory_regulation",
                "files": ["config.py"],
                "description": "d",
                "parameters": {"knob": "max_model_calls", "value": 40},
            }
        ],
    )
    records = id_prefix_records()
    ev = build_evidence(
        records=records,
        groups=group(records),
        harness_dir=None,
        history=[{"round": 1, "outcome": "rejected", "score_before": 0.5, "score_after": 0.45, "spec": spec}],
    )
    (h,) = ev.data["history"]
    assert h["accepted"] is False and h["score_change"] == -0.05
    assert h["changes"][0]["parameters"] == {"knob": "max_model_calls", "value": 40}


def test_render_parses_back_and_turns_round_trip():
    """The rendered evidence and transcript turns parse back exactly (the simulated roles rely on it)."""
    records = id_prefix_records()
    ev = build_evidence(records=records, groups=group(records), harness_dir=None, solved_tasks=["7"])
    assert parse_evidence(ev.render()) == json.loads(json.dumps(ev.data))
    text = render_turn("critic", 2, "fine") + "\n" + render_turn("moderator", None, '{"a": 1}')
    assert parse_turns(text) == [
        {"role": "critic", "pass": 2, "content": "fine"},
        {"role": "moderator", "pass": None, "content": '{"a": 1}'},
    ]


def test_extract_json_fallbacks():
    """JSON is found as the whole text, in a fenced block, or as the first object in prose."""
    assert extract_json('{"a": 1}') == {"a": 1}
    assert extract_json('say\n```json\n{"a": 2}\n```\n') == {"a": 2}
    assert extract_json('Sure! {"a": 3} hope it helps') == {"a": 3}
    assert extract_json("no json here") is None and extract_json("") is None


def test_cut_keeps_short_text_and_bounds_long_text():
    """cut() leaves short text alone and bounds long text, marking how much was cut."""
    assert cut("abc", 10) == "abc"
    long = cut("a" * 1000 + "END", 100)
    assert long.endswith("END") and "chars cut" in long and len(long) < 140
    assert agent("x")["role"] == "assistant"
