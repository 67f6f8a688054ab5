"""sim/roles/answers.py: the simulated roles' answers are a pure function of the prompt's evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_diagnose_support import (
    blind_spot_records,
    body_for,
    budget_records,
    cfg,
    id_prefix_records,
    incomplete_records,
    json_records,
    repeat_records,
    sim_client,
    truncation_records,
    write_harness,
)

from pytest_ecdysis.core.records import ModificationSpec
from pytest_ecdysis.diagnose.round import diagnose
from pytest_ecdysis.evidence.build import extract_json
from pytest_ecdysis.evidence.patterns import group
from pytest_ecdysis.sim.roles import answers as roles


def cut_records(tasks=("3", "4")):
    """Failures whose reservation result the harness cut before the model saw it, recorded as the model
    saw it (`model_view`) beside the environment's output; no marker string anywhere."""
    raw = '{"reservation_id": "ABC123", "flights": [' + '{"flight_number": "HAT001"}, ' * 60 + "]}"
    records = truncation_records(tasks)
    for r in records:
        r.tool_calls[0].result = raw
        r.tool_calls[0].model_view = raw[:1200]
    return records, len(raw)


def nofdcr_spec(records, harness=None, **kw) -> ModificationSpec:
    """The spec the simulated analyst writes in one pass (no review)."""
    return ModificationSpec.model_validate(
        json.loads(roles.answer("analyst", body_for("analyst", records, harness, fmt="spec", **kw)))
    )


def fdcr(tmp_path: Path, records, *, solved=(), history=(), passes=2):
    harness = write_harness(tmp_path)
    return diagnose(
        records=records,
        groups=group(records),
        harness_dir=harness,
        history=list(history),
        solved_tasks=solved if isinstance(solved, dict) else list(solved),
        cfg=cfg(passes),
        round_dir=tmp_path / "round",
        client=sim_client(),
    )


def knobs(spec: ModificationSpec) -> dict[str, dict]:
    return {c.parameters["knob"]: c.parameters for c in spec.changes}


def test_answer_is_a_pure_function_of_the_prompt(tmp_path):
    """The same request body gives the same answer, for every role (a fresh call knows nothing else)."""
    h = write_harness(tmp_path)
    records = id_prefix_records() + incomplete_records()
    for role in roles.ROLES:
        body = body_for(role, records, h)
        assert roles.answer(role, json.loads(json.dumps(body))) == roles.answer(role, body)


def test_prompt_without_evidence_is_refused():
    """A role prompt with no evidence block is an error the server can answer with HTTP 400."""
    with pytest.raises(ValueError, match="no <evidence>"):
        roles.answer("analyst", {"messages": [{"role": "user", "content": "fix my harness"}]})
    with pytest.raises(ValueError, match="--ecdysis-editor sim"):
        roles.answer("editor", {"messages": []})
    with pytest.raises(ValueError, match="not 'agent'"):
        roles.answer("agent", {"messages": []})


def test_id_not_found_errors_map_to_error_feedback_and_prefix_rule(tmp_path):
    """'not found' errors on an id argument -> error_feedback and id_normalisation with the '#' rule seen
    in the user's message."""
    spec = nofdcr_spec(id_prefix_records(), write_harness(tmp_path))
    k = knobs(spec)
    assert set(k) == {"error_feedback", "id_normalisation"}
    assert k["id_normalisation"]["rules"] == ["order_id:#prefix"]
    assert {c.files[0] for c in spec.changes} == {"feedback.py", "tools.py"}


def test_errors_that_already_name_the_argument_need_no_error_feedback(tmp_path):
    """When the harness's error already names the argument and expected form, error_feedback is not proposed."""
    records = id_prefix_records()
    for r in records:
        r.tool_calls[0].result = "Error: order_id not found; expected an id like #W1234567"
    assert "error_feedback" not in knobs(nofdcr_spec(records, write_harness(tmp_path)))


def test_results_the_model_saw_cut_raise_max_tool_result_chars_above_the_raw_length(tmp_path):
    """A tool result the model saw shorter than the environment's (model_view vs raw result) on failing
    trials -> max_tool_result_chars = raw length x1.25 rounded up to 500; the example harness's
    `[truncated N chars]` marker alone (no model_view) is not read."""
    records, raw = cut_records()
    k = knobs(nofdcr_spec(records, write_harness(tmp_path)))
    assert (
        set(k) == {"max_tool_result_chars"}
        and k["max_tool_result_chars"]["value"] == -(-raw * 5 // 4 // 500) * 500
    )
    assert "max_tool_result_chars" not in knobs(nofdcr_spec(truncation_records(), write_harness(tmp_path)))


@pytest.mark.parametrize("kind", ["budget_exhausted", "call_limit_reached"])
def test_a_harness_limit_note_raises_max_model_calls(tmp_path, kind):
    """A harness note whose kind names a limit -> max_model_calls at twice the current setting (20 -> 40),
    whatever the harness wrote in the conversation."""
    records = budget_records()
    for r in records:
        r.harness_notes = [{"kind": kind, "detail": "stopped"}]
        r.excerpt = [{"role": "assistant", "content": "Goodbye. ###STOP###"}]
    k = knobs(nofdcr_spec(records, write_harness(tmp_path)))
    assert k == {"max_model_calls": {"knob": "max_model_calls", "value": 40}}


def test_an_error_that_only_says_expected_still_gets_error_feedback(tmp_path):
    """'order_id expected' shows no form (no example, no rule): error_feedback is still proposed; an error
    showing the form by example is not touched (previous test)."""
    records = id_prefix_records()
    for r in records:
        r.tool_calls[0].result = "Error: order not found (order_id expected)"
    assert "error_feedback" in knobs(nofdcr_spec(records, write_harness(tmp_path)))


def test_a_single_failure_analyst_answers_work_left_undone_with_a_completion_check(tmp_path):
    """Self-evolution's analyst sees one failure: incomplete work with no mechanism -> completion_check
    (as a real model would), where an aggregated prompt needs two tasks."""
    (one,) = incomplete_records(("7",))
    assert set(knobs(nofdcr_spec([one], write_harness(tmp_path)))) == {"completion_check"}


def test_cross_task_incomplete_work_gets_completion_check(tmp_path):
    """DB failures ended by a stop on two tasks, with no harness mechanism visible -> completion_check."""
    assert set(knobs(nofdcr_spec(incomplete_records(), write_harness(tmp_path)))) == {"completion_check"}


def test_repeated_identical_failing_calls_get_repeat_guard_unless_already_flagged(tmp_path):
    """Identical failing calls answered with the same error -> repeat_guard; a distinct second error -> none."""
    h = write_harness(tmp_path)
    assert set(knobs(nofdcr_spec(repeat_records(), h))) == {"repeat_guard"}
    assert "repeat_guard" not in knobs(nofdcr_spec(repeat_records(flagged=True), h))


def test_invalid_json_errors_change_nothing(tmp_path):
    """Invalid-JSON tool errors the harness already answers -> no change, the group left alone."""
    spec = nofdcr_spec(json_records(), write_harness(tmp_path))
    assert spec.changes == [] and "invalid JSON" in spec.left_alone[0].reason


def test_single_task_blind_spot_is_left_alone_with_fdcr_but_tempts_without(tmp_path):
    """A single-task failure with a near-miss value: the lone analyst writes a policy_rule naming the value;
    with FDCR the Critic blocks it and the group ends in left_alone."""
    records = blind_spot_records()
    alone = nofdcr_spec(records, write_harness(tmp_path))
    assert knobs(alone)["policy_rule"]["text"].count("HAT107") == 1
    d = fdcr(tmp_path, records)
    assert d.spec is None and d.reason == "no_spec"
    written = json.loads((tmp_path / "round" / "spec.json").read_text())
    assert written["changes"] == [] and "over-fitted" in written["left_alone"][0]["reason"]


def test_single_task_without_visible_value_is_a_blind_spot(tmp_path):
    """A single-task incomplete failure with no near-miss value is left alone as a model blind spot."""
    records = blind_spot_records()
    for r in records:
        r.excerpt[0]["content"] = "Please move me to the later flight."
    spec = nofdcr_spec(records, write_harness(tmp_path))
    assert spec.changes == [] and "blind spot" in spec.left_alone[0].reason


def test_critic_narrows_changes_touching_solved_tasks(tmp_path):
    """With tasks the incumbent solves, the Critic narrows completion_check (trigger, guard, watch_tasks)."""
    body = body_for(
        "critic",
        incomplete_records(),
        write_harness(tmp_path),
        solved_tasks=["20", "21"],
        turns=[
            {
                "role": "analyst",
                "pass": 1,
                "content": roles.answer(
                    "analyst", body_for("analyst", incomplete_records(), solved_tasks=["20", "21"])
                ),
            }
        ],
    )
    (verdict,) = extract_json(roles.answer("critic", body))["verdicts"]
    assert verdict["verdict"] == "narrow" and verdict["watch_tasks"] == ["20", "21"]
    d = fdcr(tmp_path, incomplete_records(), solved=["20", "21"])
    (change,) = d.spec.changes
    assert "at least one write" in change.trigger and d.spec.watch_tasks == ["20", "21"]


def test_critic_accepts_when_no_solved_task_is_touched(tmp_path):
    """Without solved tasks, the same completion_check passes review unchanged."""
    d = fdcr(tmp_path, incomplete_records(), solved=[])
    (change,) = d.spec.changes
    assert change.trigger == "the agent is about to end the conversation" and d.spec.watch_tasks == []


def test_rejected_spec_is_not_proposed_unchanged(tmp_path):
    """A change identical to one rejected in an earlier round is dropped and its group left alone, saying why."""
    first = fdcr(tmp_path, budget_records())
    history = [
        {"round": 1, "outcome": "rejected", "score_before": 0.5, "score_after": 0.5, "spec": first.spec}
    ]
    again = fdcr(tmp_path / "2", budget_records(), history=history)
    assert (
        again.spec is None
        and "rejected"
        in json.loads((tmp_path / "2" / "round" / "spec.json").read_text())["left_alone"][0]["reason"]
    )
    accepted = [
        {"round": 1, "outcome": "accepted", "score_before": 0.5, "score_after": 0.6, "spec": first.spec}
    ]
    assert (
        fdcr(tmp_path / "3", budget_records(), history=accepted).spec is not None
    )  # value knobs may rise again


@pytest.mark.parametrize("removed", ["id", "truncation", "budget", "incomplete"])
def test_removing_a_groups_evidence_removes_it_from_the_spec(tmp_path, removed):
    """Drop one group's records from the prompt and that group (and its knob) leaves the spec."""
    scenarios = {
        "id": id_prefix_records(),
        "truncation": cut_records()[0],
        "budget": budget_records(),
        "incomplete": incomplete_records(),
    }
    full = fdcr(tmp_path / "full", [r for rs in scenarios.values() for r in rs])
    less = fdcr(tmp_path / "less", [r for name, rs in scenarios.items() if name != removed for r in rs])
    gone = {s for r in scenarios[removed] for s in [group([r])[0].signature]}
    addressed_full = {s for c in full.spec.changes for s in c.addresses}
    addressed_less = {s for c in less.spec.changes for s in c.addresses}
    assert gone <= addressed_full and not gone & addressed_less
    assert len(less.spec.changes) < len(full.spec.changes)


def test_answers_over_a_real_sim_server(tmp_path, monkeypatch):
    """Over the real simulated server (HTTP, openai client), FDCR gets the same spec as roles.answer directly."""
    server = pytest.importorskip("pytest_ecdysis.sim.server")
    handle = server.start_background(port=0, knowledge={})
    try:
        monkeypatch.setenv("ECDYSIS_SIM_URL", handle.url)
        records = id_prefix_records() + incomplete_records()
        harness = write_harness(tmp_path)
        over_http = diagnose(
            records=records,
            groups=group(records),
            harness_dir=harness,
            history=[],
            solved_tasks=[],
            cfg=cfg(1),
            round_dir=tmp_path / "http",
        )
        direct = diagnose(
            records=records,
            groups=group(records),
            harness_dir=harness,
            history=[],
            solved_tasks=[],
            cfg=cfg(1),
            round_dir=tmp_path / "direct",
            client=sim_client(),
        )
        assert over_http.spec == direct.spec and over_http.calls == 4
        assert over_http.tokens["total"] > 0
    finally:
        handle.stop()


def test_critic_narrows_only_for_solved_tasks_the_change_would_touch(tmp_path):
    """Given the tools each solved task used, completion_check is narrowed for tasks with a write (watched)
    and passes unchanged when no solved task writes."""
    touching = fdcr(
        tmp_path / "a",
        incomplete_records(),
        solved={"20": ["get_order_details", "cancel_pending_order"], "21": ["get_user_details"]},
    )
    assert touching.spec.watch_tasks == ["20"] and "at least one write" in touching.spec.changes[0].trigger
    reading = fdcr(tmp_path / "b", incomplete_records(), solved={"21": ["get_user_details"]})
    assert reading.spec.watch_tasks == [] and reading.spec.changes[0].guards == [
        "at most one check per conversation"
    ]


def test_roles_module_reads_no_server_state_or_ground_truth():
    """sim/roles/answers.py and its stages (roles/evidence.py, roles/analysis.py) import only the evidence
    protocol and records: never the agent, profiles or ground truth."""
    import ast

    imported: set[str] = set()
    for name in ("answers.py", "evidence.py", "analysis.py"):
        tree = ast.parse((Path(roles.__file__).parent / name).read_text())
        imported |= {
            node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
        }
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert imported <= {
        "__future__",
        "json",
        "math",
        "re",
        "collections.abc",
        "typing",
        "pytest_ecdysis.evidence.build",
        "pytest_ecdysis.core.records",
        "pytest_ecdysis.sim.reading",
        "pytest_ecdysis.sim.roles.evidence",
        "pytest_ecdysis.sim.roles.analysis",
    }


def test_early_ends_split_across_groups_still_count_as_cross_task(tmp_path):
    """Work ended early on two tasks whose records fall in different groups (db vs db+communicate) is one
    pattern: completion_check addresses both groups."""
    a, b = incomplete_records(("7", "8"))
    b.failed_components = ["db", "communicate"]
    spec = nofdcr_spec([a, b], write_harness(tmp_path))
    (change,) = spec.changes
    assert change.parameters["knob"] == "completion_check" and len(change.addresses) == 2


def test_wrong_value_near_an_earlier_argument_is_model_like(tmp_path):
    """A write whose id is two characters off the id read earlier is a wrong value (a slip), not an early
    end: on one task it tempts a policy_rule, never a completion_check."""
    (r,) = incomplete_records(("7",))
    r.tool_calls[1].arguments["order_id"] = "#W77"  # read '#W70' earlier
    r.excerpt[0]["content"] = "Cancel my order please."
    k = knobs(nofdcr_spec([r], write_harness(tmp_path)))
    assert set(k) == {"policy_rule"} and "#W70" in k["policy_rule"]["text"]


def test_critic_blocks_changes_to_the_entry_point(tmp_path):
    """A proposal editing __init__.py (build_agent, the runtime contract) is blocked by the Critic."""
    proposal = {
        "proposals": [
            {
                "component": "tool_interface",
                "files": ["__init__.py"],
                "description": "wrap tools",
                "addresses": ["too_many_errors|db|get_order_details|not_found"],
                "parameters": {"knob": "error_feedback"},
            }
        ],
        "left_alone": [],
    }
    body = body_for(
        "critic",
        id_prefix_records(),
        write_harness(tmp_path),
        turns=[{"role": "analyst", "pass": 1, "content": "```json\n" + json.dumps(proposal) + "\n```"}],
    )
    (verdict,) = extract_json(roles.answer("critic", body))["verdicts"]
    assert verdict["verdict"] == "block" and "runtime-contract" in verdict["reason"]


def _documented_check(tmp_path, doc):
    harness = write_harness(tmp_path)
    (harness / "closing.py").write_text(
        f'"""Closing."""\n\ndef check_before_end(history):\n    """{doc}"""\n    return None\n'
    )
    return harness


def test_the_analyst_does_not_propose_what_the_harness_map_shows_it_already_does(tmp_path):
    """Work left undone on two tasks: with a harness whose map documents a check before the end, the
    analyst proposes no completion_check and says why; a map whose docstring says there is none (or none
    documented) still gets one. The same holds for a harness that documents a repeat guard."""
    records = incomplete_records()
    has = _documented_check(
        tmp_path / "a",
        "Ask the model once to check that every request is complete before the conversation closes.",
    )
    spec = nofdcr_spec(records, has)
    assert "completion_check" not in knobs(spec)
    assert any("already does this (closing.py: check_before_end" in x.reason for x in spec.left_alone)
    absent = _documented_check(tmp_path / "b", "v1: no completion check.")
    assert set(knobs(nofdcr_spec(records, absent))) == {"completion_check"}
    guard = write_harness(tmp_path / "c")
    (guard / "feedback.py").write_text(
        '"""Tool results."""\n\ndef format_tool_result(name, args, content, error):\n'
        '    """Errors of an identical call that already failed are marked as a repeat."""\n'
        "    return content\n"
    )
    assert "repeat_guard" not in knobs(nofdcr_spec(repeat_records(), guard))


def test_the_analyst_proposes_from_cut_results_when_the_harness_already_checks_the_end(tmp_path):
    """The evidence shows results the model saw cut (its view shorter than τ²'s raw output) beside work left
    undone: with a completion check already in the harness, the proposal is the cut, not another check."""
    cut, raw_len = cut_records(("3", "4"))
    harness = _documented_check(
        tmp_path, "Ask the model once to check the work before the conversation ends."
    )
    k = knobs(nofdcr_spec([*cut, *incomplete_records()], harness))
    assert "completion_check" not in k and k["max_tool_result_chars"]["value"] >= raw_len
    assert "completion_check" in knobs(
        nofdcr_spec([*cut, *incomplete_records()], write_harness(tmp_path / "v1"))
    )


def test_values_the_environment_accepted_that_differ_from_the_users_get_a_value_check(tmp_path):
    """Writes τ² accepted (no error) carrying a value two characters off the one the user stated, on two
    tasks: the analyst proposes a value_check in the tool interface (not a completion check, not a rule
    naming one task's value), quoting the evidence; the sim editor implements it in the example harness."""
    records = incomplete_records(("7", "8"))
    for r, (wrong, right) in zip(records, (("#W77", "#W70"), ("#W88", "#W80")), strict=True):
        r.tool_calls[1].arguments["order_id"] = wrong
        r.excerpt[0]["content"] = f"Cancel my order {right} please."
    spec = nofdcr_spec(records, write_harness(tmp_path))
    (change,) = spec.changes
    assert change.parameters["knob"] == "value_check" and change.component == "tool_interface"
    assert "'#W77'" in change.expected_effect and "'#W70'" in change.expected_effect
    assert len(change.addresses) == len({s for s in change.addresses})
    with_check = write_harness(tmp_path / "checked")
    (with_check / "tools.py").write_text(
        '"""Tools."""\n\ndef normalise_arguments(name, args):\n    return args\n\n\ndef repair_values(name, args, shown):\n'
        '    """Each value the conversation never showed is replaced by the shown value one character off."""\n'
        "    return args\n"
    )
    assert nofdcr_spec(records, with_check).changes == []

    import shutil

    from pytest_ecdysis.sim.editor.recipes import apply_spec

    example = tmp_path / "example"
    shutil.copytree(
        Path(__file__).resolve().parents[1] / "pytest_ecdysis_tau2" / "example_harness",
        example,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    done = apply_spec(spec, example)
    assert done.applied == ["value_check"] and not done.not_implementable
    tools = (example / "tools.py").read_text()
    assert "def repair_values" in tools and "repair_values(" in (example / "agent.py").read_text()
    namespace: dict = {}
    exec(compile(tools, "tools.py", "exec"), namespace)
    shown = namespace["shown_values"]([{"role": "user", "content": "Cancel my order #W70 please."}])
    assert namespace["repair_values"]("cancel_pending_order", {"order_id": "#W77"}, shown) == {
        "order_id": "#W70"
    }
    assert namespace["repair_values"]("get_order_details", {"order_id": "#W77"}, shown) == {
        "order_id": "#W77"
    }
