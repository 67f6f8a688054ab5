"""The engineer's edit fixtures still fit the example harness and do what their README says.

`tests/fixtures/engineer_edits/*.patch` are unified diffs against `pytest_ecdysis_tau2/example_harness/`, scored by
`benchmarks/bench_engineer_edits.py` before and after the simulated model changes. A fixture that no
longer applies, that the static check would refuse as a candidate, or whose code lost its behaviour would
make those figures meaningless; these tests say so first.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.validate.static import check_candidate

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "engineer_edits"
PATCHES = sorted(FIXTURES.glob("*.patch"))


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _edited(tmp_path: Path, name: str) -> Path:
    shutil.copytree(
        REPO / "pytest_ecdysis_tau2" / "example_harness",
        tmp_path / "example_harness",
        ignore=shutil.ignore_patterns("recipes", "__pycache__"),
    )
    proc = subprocess.run(
        ["git", "apply", str(FIXTURES / f"{name}.patch")], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, (
        f"{name}.patch no longer applies to pytest_ecdysis_tau2/example_harness/: {proc.stderr}"
    )
    return tmp_path / "example_harness"


def _module(harness: Path, sub: str):
    package = load_harness(harness)
    return importlib.import_module(f"{package.__name__}.{sub}")


def test_fixtures_exist_and_are_documented():
    """At least the three edits the fixtures were written for, each described in the README."""
    names = {p.stem for p in PATCHES}
    assert {"rule_exact_values", "rule_irrelevant", "error_did_you_mean"} <= names
    readme = (FIXTURES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in names)


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.stem)
def test_patch_applies_and_passes_the_static_check(tmp_path, patch):
    """Each fixture applies, changes something, adds no static-check finding and still loads."""
    harness = _edited(tmp_path, patch.stem)
    base = _files(REPO / "pytest_ecdysis_tau2" / "example_harness")
    edited = _files(harness)
    assert any(edited[path] != base.get(path) for path in edited)
    assert check_candidate(edited, base) == []
    assert callable(load_harness(harness).build_agent)


@pytest.mark.parametrize(
    "name, added",
    [
        ("rule_exact_values", "do not send the same call again"),
        ("rule_irrelevant", "no markdown headings, tables or emoji"),
        ("rule_contradicts_policy", "transfer every cancellation"),
    ],
)
def test_rule_edits_add_their_rule_and_keep_the_others(tmp_path, name, added):
    prompts = _module(_edited(tmp_path, name), "prompts")
    text = prompts.build_system_prompt("POLICY TEXT")
    assert added in " ".join(text.split())
    assert "<policy>\nPOLICY TEXT\n</policy>" in text
    assert "get the user's explicit\n  confirmation (yes)" in text


def test_did_you_mean_names_the_close_value_seen_earlier(tmp_path):
    feedback = _module(_edited(tmp_path, "error_did_you_mean"), "feedback")
    history = [
        "I am Fatima Johnson, my order is #W4967593, flying one-way on 2024-05-11.",
        '{"reservations": ["K1NW8N", "PDB8KL"], "payment_methods": {"certificate_7504069": {}}}',
    ]
    out = feedback.format_tool_result(
        "get_reservation_details",
        {"reservation_id": "K1NW5N"},
        "Reservation K1NW5N not found",
        True,
        seen_texts=history,
    )
    assert out == (
        'Error: Reservation K1NW5N not found ("K1NW5N" was not found; did you mean "K1NW8N", '
        "as written earlier in this conversation?)"
    )
    assert '"#W4967593"' in feedback.format_tool_result(
        "get_order_details", {"order_id": "W4967593"}, "Error: Order not found", True, seen_texts=history
    )
    assert '"Johnson"' in feedback.format_tool_result(
        "find_user_id_by_name_zip",
        {"first_name": "Fatima", "last_name": "Johnsox", "zip": "78712"},
        "Error: User not found",
        True,
        seen_texts=history,
    )
    # an error that names its value: only that value is looked at (not the trip type or the date)
    out = feedback.format_tool_result(
        "book_reservation",
        {
            "flight_type": "one_way",
            "date": "2024-05-12",
            "payment_methods": [{"payment_id": "certificate_7504061"}],
        },
        "Payment method certificate_7504061 not found",
        True,
        seen_texts=history,
    )
    assert out == (
        'Error: Payment method certificate_7504061 not found ("certificate_7504061" was not found; '
        'did you mean "certificate_7504069", as written earlier in this conversation?)'
    )
    # nothing close, another kind of error, or no history: the error as before
    assert (
        feedback.format_tool_result(
            "x", {"reservation_id": "ZZZZZZ"}, "Reservation ZZZZZZ not found", True, seen_texts=history
        )
        == "Error: Reservation ZZZZZZ not found"
    )
    assert (
        feedback.format_tool_result(
            "x", {"reservation_id": "K1NW5N"}, "Not enough seats", True, seen_texts=history
        )
        == "Error: Not enough seats"
    )
    assert (
        feedback.format_tool_result("x", {"reservation_id": "K1NW5N"}, "Reservation K1NW5N not found", True)
        == "Error: Reservation K1NW5N not found"
    )


def test_repair_rewrites_an_unseen_id_to_its_one_close_seen_id(tmp_path):
    tools = _module(_edited(tmp_path, "repair_close_ids"), "tools")
    seen = tools.seen_tokens(
        '{"reservations": ["K1NW8N", "PDB8KL"], "certificate_7504069": {}} orders #W4967593 #W4967594'
    )
    assert tools.repair_ids({"reservation_id": "K1NW5N"}, seen) == (
        {"reservation_id": "K1NW8N"},
        [("K1NW5N", "K1NW8N")],
    )
    assert tools.repair_ids({"order_id": "W4967593"}, seen)[0] == {"order_id": "#W4967593"}
    fixed, done = tools.repair_ids(
        {"payment_methods": [{"payment_id": "certificate_7504061", "amount": 5}]}, seen
    )
    assert fixed == {"payment_methods": [{"payment_id": "certificate_7504069", "amount": 5}]}
    # two close seen ids (ambiguous), a far one, a seen one, or a key that is no id: left alone
    for args in (
        {"order_id": "#W4967595"},
        {"reservation_id": "ZZZZZZ"},
        {"reservation_id": "PDB8KL"},
        {"last_name": "K1NW5N"},
    ):
        assert tools.repair_ids(args, seen) == (args, [])
