"""The sim editor applies the example harness's recipes as real, importable source edits; a change it
has no recipe for is reported as not implementable, never guessed (docs/internals.md, "Spec parameters")."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.sim.editor.recipes import apply_spec, check_usable, load_recipes

EXAMPLE = Path(__file__).resolve().parents[1] / "pytest_ecdysis_tau2" / "example_harness"
KNOBS = {
    "max_model_calls",
    "max_tool_result_chars",
    "keep_last_messages",
    "error_feedback",
    "id_normalisation",
    "completion_check",
    "repeat_guard",
    "policy_rule",
    "value_check",
}


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    target = tmp_path / "harness"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _spec(*changes: dict) -> dict:
    return {
        "summary": "s",
        "changes": [
            {"component": "policy_prompt", "files": [], "description": "d", "parameters": c} for c in changes
        ],
    }


def _module(harness: Path, name: str):
    package = load_harness(harness)
    return importlib.import_module(f"{package.__name__}.{name}")


def test_one_recipe_per_documented_knob() -> None:
    """The example harness ships exactly one recipe per knob of docs/internals.md, and no Python module
    in `recipes/` (it is data for the editor, not importable harness code)."""
    assert set(load_recipes(EXAMPLE)) == KNOBS
    assert not list((EXAMPLE / "recipes").glob("*.py"))


def test_settings_recipes(harness: Path) -> None:
    """Value knobs set the named constant in config.py and nothing else."""
    result = apply_spec(
        _spec(
            {"knob": "max_model_calls", "value": 32},
            {"knob": "keep_last_messages", "value": 64},
            {"knob": "max_tool_result_chars", "value": 5000},
        ),
        harness,
    )
    assert result.applied == ["max_model_calls", "keep_last_messages", "max_tool_result_chars"]
    assert result.files == ["config.py"]
    config = _module(harness, "config")
    assert (config.MAX_MODEL_CALLS, config.KEEP_LAST_MESSAGES, config.MAX_TOOL_RESULT_CHARS) == (32, 64, 5000)


def test_error_feedback_names_argument_and_expected_form(harness: Path) -> None:
    """After `error_feedback`, a tool error names each argument sent and the expected form."""
    apply_spec(_spec({"knob": "error_feedback"}), harness)
    feedback = _module(harness, "feedback")
    text = feedback.format_tool_result("get_order", {"order_id": "W123"}, "Error: order not found", True)
    assert text.startswith("Error: order not found") and "order_id='W123'" in text and "expected" in text
    assert feedback.format_tool_result("get_order", {"order_id": "#W1"}, "ok", False) == "ok"


def test_id_normalisation_rules_accumulate(harness: Path) -> None:
    """`id_normalisation` rules normalise ids before the call; a later round adds rules, keeping earlier ones."""
    apply_spec(_spec({"knob": "id_normalisation", "rules": ["order_id:#prefix"]}), harness)
    apply_spec(_spec({"knob": "id_normalisation", "rules": ["order_id:#prefix", "user_id:strip"]}), harness)
    tools = _module(harness, "tools")
    assert tools.ID_RULES == ["order_id:#prefix", "user_id:strip"]
    args = tools.normalise_arguments("t", {"order_id": " W12 ", "user_id": "mia li", "reservation_id": "abc"})
    assert args == {"order_id": "#W12", "user_id": "miali", "reservation_id": "ABC"}


def test_completion_check_once_per_conversation(harness: Path) -> None:
    """`completion_check` answers a closing reply with a check message, once; other replies pass."""
    apply_spec(_spec({"knob": "completion_check"}), harness)
    closing = _module(harness, "closing")
    closing_reply = {"role": "assistant", "content": "Done. Is there anything else I can help you with?"}
    check = closing.check_before_end([{"role": "user", "content": "hi"}, closing_reply])
    assert check and "figures" in check
    assert closing.check_before_end([{"role": "assistant", "content": "Which flight?"}]) is None
    assert (
        closing.check_before_end([closing_reply, {"role": "user", "content": check}, closing_reply]) is None
    )


def test_repeat_guard_marks_identical_failing_call(harness: Path) -> None:
    """`repeat_guard` gives a repeated identical failing call an error different from the first one."""
    apply_spec(_spec({"knob": "repeat_guard"}), harness)
    feedback = _module(harness, "feedback")
    calls = {"a": ("get_order", {"order_id": "W1"}), "b": ("get_order", {"order_id": "W1"})}
    first = [{"role": "tool", "tool_call_id": "a", "content": "Error: not found"}]
    assert feedback.flag_repeated_error([], calls, "a", "Error: not found") == "Error: not found"
    assert feedback.flag_repeated_error(first, calls, "b", "Error: not found") != "Error: not found"
    assert "flag_repeated_error" in (harness / "agent.py").read_text()


def test_policy_rule_appends_the_text_literally(harness: Path) -> None:
    """`policy_rule` appends its text as one rule line of the system prompt."""
    apply_spec(_spec({"knob": "policy_rule", "text": 'Spell the name "Mia Li" exactly.'}), harness)
    prompts = _module(harness, "prompts")
    assert prompts.build_system_prompt("P").endswith('- Spell the name "Mia Li" exactly.')


def test_not_implementable_is_reported_not_guessed(harness: Path) -> None:
    """Unknown knobs, missing or ill-typed parameters and already-applied recipes change nothing."""
    before = {p: p.read_bytes() for p in harness.rglob("*.py")}
    result = apply_spec(
        _spec(
            {"knob": "rewrite_everything"},
            {"knob": "max_model_calls", "value": "many"},
            {"knob": "id_normalisation"},
            {},
        ),
        harness,
    )
    assert result.applied == [] and len(result.not_implementable) == 4
    assert "no edit recipe" in result.not_implementable[0]["reason"]
    assert {p: p.read_bytes() for p in harness.rglob("*.py")} == before
    apply_spec(_spec({"knob": "completion_check"}), harness)
    again = apply_spec(_spec({"knob": "completion_check"}), harness)
    assert again.applied == [] and "already in place" in again.not_implementable[0]["reason"]


def test_a_narrowed_spec_gets_a_narrower_edit(harness: Path) -> None:
    """completion_check narrowed by review ("... after at least one write ...") checks a closing reply only
    when the conversation changed a record; the base trigger checks every closing reply."""
    closing_reply = {"role": "assistant", "content": "Done. Is there anything else I can help you with?"}
    lookup = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "get_order_details", "arguments": "{}"}}
        ],
    }
    write = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "2", "type": "function", "function": {"name": "cancel_pending_order", "arguments": "{}"}}
        ],
    }
    narrowed = _spec({"knob": "completion_check"})
    narrowed["changes"][0].update(
        trigger="the agent is about to end the conversation after at least one write, and no check was sent yet",
        guards=["at most one check per conversation", "leaves conversations that already succeed unchanged"],
    )
    assert apply_spec(narrowed, harness).applied == ["completion_check"]
    closing = _module(harness, "closing")
    assert closing.check_before_end([lookup, closing_reply]) is None
    assert closing.check_before_end([lookup, write, closing_reply])


@pytest.mark.parametrize(
    ("knob", "trigger"),
    [
        ("policy_rule", "only the tool calls named in the rule"),
        ("completion_check", "the user asks about baggage"),
    ],
)
def test_a_trigger_the_recipe_cannot_implement_is_refused_with_the_reason(
    harness: Path, knob: str, trigger: str
):
    """A spec whose trigger is neither the recipe's nor one of its narrowings is refused, saying what the
    recipe can implement; nothing is written."""
    before = {p: p.read_bytes() for p in harness.rglob("*.py")}
    spec = _spec({"knob": knob, "text": "Use HAT107."})
    spec["changes"][0]["trigger"] = trigger
    result = apply_spec(spec, harness)
    assert result.applied == [] and "cannot implement the trigger" in result.not_implementable[0]["reason"]
    assert {p: p.read_bytes() for p in harness.rglob("*.py")} == before


def test_sim_editor_without_recipes_is_a_usage_error(tmp_path: Path) -> None:
    """A harness without recipes cannot use the sim editor; the error names the other editors."""
    (tmp_path / "__init__.py").write_text("")
    with pytest.raises(UsageError, match="builtin.*cmd:"):
        check_usable(tmp_path)
