"""Creation from Direct with the simulated editor: the Direct harness ships its own edit recipes, which
implement a spec's mechanism by creating the layer it names (feedback.py, tools.py, closing.py, prompts.py)
and wiring it into `__init__.py`; the same recipe rules as the example harness's (`sim/editor/recipes.py`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from suite_scripted import DIRECT_HARNESS, ScriptedModel, call, run, text
from test_diagnose_support import blind_spot_records, cfg, id_prefix_records, incomplete_records, sim_client

from pytest_ecdysis.diagnose.round import diagnose
from pytest_ecdysis.edit.editors import SimEditor
from pytest_ecdysis.evidence.patterns import group
from pytest_ecdysis.evolve.stages import edit_stage
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.sim.editor.recipes import apply_spec, load_recipes

pytest.importorskip("tau2")


def _spec(**change) -> dict:
    return {"summary": "s", "changes": [{"component": "c", "files": [], "description": "d", **change}]}


def _repo(tmp_path: Path) -> Path:
    """A git repository holding a copy of the Direct harness as `direct_harness/`, committed."""
    harness = tmp_path / "repo" / "direct_harness"
    shutil.copytree(DIRECT_HARNESS, harness, ignore=shutil.ignore_patterns("__pycache__"))
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "d"],
    ):
        subprocess.run(["git", *args], cwd=harness.parent, check=True)
    return harness


class _Ledger:
    def write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_a_round_from_direct_makes_a_real_edit_the_guard_accepts(tmp_path):
    """FDCR (sim roles) on scripted failures of the Direct harness writes a spec naming layers Direct does
    not have; the one sim editor call creates and wires them, the guard accepts the candidate (only harness
    files, `__init__.py` kept, no static findings), and the edited harness runs a real τ² trial in which a
    tool error shows the arguments sent and the form expected."""
    harness = _repo(tmp_path)
    records = id_prefix_records() + incomplete_records() + blind_spot_records()
    d = diagnose(
        records=records,
        groups=group(records),
        harness_dir=harness,
        history=[],
        solved_tasks=[],
        cfg=cfg(2),
        round_dir=tmp_path / "round",
        strategy="ecdysis",
        client=sim_client([]),
    )
    assert d.spec is not None, d.detail
    knobs = {c.parameters["knob"] for c in d.spec.changes}
    assert {"error_feedback", "completion_check"} <= knobs
    worktree = gitworktree.add_worktree(harness)
    try:
        ev = SimpleNamespace(
            editor=SimEditor(),
            cfg=SimpleNamespace(editor="sim", editor_budget_s=60),
            ledger=_Ledger(),
            check_integrity=lambda what: None,
            say=lambda line: None,
        )
        doc = edit_stage(ev, d.spec, worktree, tmp_path / "round", "round 1")
        assert doc["outcome"] is None, doc["reason"]
        assert not doc["not_implementable"] and not doc["static_findings"]
        assert {
            "direct_harness/__init__.py",
            "direct_harness/feedback.py",
            "direct_harness/closing.py",
        } <= set(doc["changed"])
        model = ScriptedModel(
            [call("get_reservation_details", json.dumps({"reservation_id": "nope"})), text("Done.")]
        )
        result = run("3", model, harness=worktree.harness_dir)
        assert result.tool_calls[0].error  # the id really is wrong: the hint is what the model sees
        seen = model.requests[1]["messages"][-1]["content"]
        assert seen.startswith("Error") and "reservation_id='nope'" in seen and "expected form" in seen
    finally:
        worktree.remove()


def test_direct_recipes_follow_the_recipe_rules(tmp_path):
    """A narrowed completion check gets the narrower edit (only after a write); a spec whose trigger the
    recipe cannot implement, or a knob Direct has no recipe for, is refused with the reason and leaves the
    files as they were; two recipes sharing a layer both land in it."""
    harness = tmp_path / "direct"
    shutil.copytree(DIRECT_HARNESS, harness, ignore=shutil.ignore_patterns("__pycache__"))
    assert {"error_feedback", "repeat_guard", "id_normalisation", "completion_check", "policy_rule"} <= set(
        load_recipes(harness)
    )
    before = (harness / "__init__.py").read_text()
    refused = apply_spec(
        _spec(parameters={"knob": "id_normalisation", "rules": ["order_id:upper"]}, trigger="every call"),
        harness,
    )
    assert (
        refused.applied == []
        and "cannot implement the trigger 'every call'" in refused.not_implementable[0]["reason"]
    )
    unknown = apply_spec(_spec(parameters={"knob": "max_model_calls", "value": 40}), harness)
    assert unknown.not_implementable == [
        {"knob": "max_model_calls", "reason": "no edit recipe for knob 'max_model_calls'"}
    ]
    assert (harness / "__init__.py").read_text() == before and not (harness / "tools.py").exists()

    narrowed = apply_spec(
        _spec(
            parameters={"knob": "completion_check"},
            trigger="the agent is about to end the conversation after at least one write",
        ),
        harness,
    )
    assert narrowed.applied == ["completion_check"]
    closing = (harness / "closing.py").read_text()
    assert "LOOKUP_PREFIXES" in closing and "from . import closing" in (harness / "__init__.py").read_text()
    both = apply_spec(
        {
            "changes": [
                {"parameters": {"knob": "error_feedback"}, "trigger": "a tool call returns an error"},
                {
                    "parameters": {"knob": "repeat_guard"},
                    "trigger": "an identical tool call right after it failed",
                },
            ]
        },
        harness,
    )
    assert both.applied == ["error_feedback", "repeat_guard"]
    feedback = (harness / "feedback.py").read_text()
    assert "def argument_hint" in feedback and "def flag_repeated_error" in feedback
    compile((harness / "__init__.py").read_text(), "__init__.py", "exec")
