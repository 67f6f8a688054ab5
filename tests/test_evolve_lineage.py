"""Diagnosis sees the lineage (`evolve/lineage.py`, `evidence.context.history_view`): each earlier round's spec,
diff, decision and flips, bounded."""

from __future__ import annotations

from pathlib import Path

from pytest_ecdysis.evidence.context import MAX_DIFF_CHARS, MAX_FLIPS_LISTED, MAX_HISTORY_DIFFS, history_view
from pytest_ecdysis.evolve.lineage import lineage_of

SPEC = {
    "summary": "cut tool results at 4000",
    "changes": [
        {
            "component": "tool_interface",
            "files": ["feedback.py"],
            "description": "longer results",
            "parameters": {"knob": "max_result_chars", "value": 4000},
        }
    ],
}


def test_lineage_of_a_round_reads_its_diff_flips_and_decision(tmp_path: Path) -> None:
    (tmp_path / "candidate.diff").write_text(
        "--- a/feedback.py\n+++ b/feedback.py\n-LIMIT = 1200\n+LIMIT = 4000\n"
    )
    row = {
        "flips": {"failed_to_solved": ["a/1"], "solved_to_failed": ["a/2"]},
        "decision": {"rule": "strict", "p_value": 0.5, "effect": -0.03, "wins": 1, "losses": 2},
    }
    out = lineage_of(tmp_path, row)
    assert "+LIMIT = 4000" in out["diff"] and out["flips"] == row["flips"] and out["decision"]["losses"] == 2
    assert lineage_of(tmp_path / "none", {}) == {"diff": None, "flips": None, "decision": None}


def test_history_shows_the_lineage_bounded() -> None:
    """Every round keeps its decision and flips (at most MAX_FLIPS_LISTED tasks a list); only the latest
    MAX_HISTORY_DIFFS rounds show their diff, each cut to MAX_DIFF_CHARS."""
    rounds = [
        {
            "round": n,
            "outcome": "rejected",
            "score_before": 0.5,
            "score_after": 0.4,
            "spec": SPEC,
            "diff": "+" + "x" * 5000,
            "flips": {"solved_to_failed": [f"t/{i}" for i in range(25)], "failed_to_solved": []},
            "decision": {"rule": "paired", "method": "sign", "p_value": 0.9, "wins": 0, "losses": 25},
        }
        for n in range(1, 6)
    ]
    view = history_view(rounds)
    assert [v["decision"]["losses"] for v in view] == [25] * 5
    assert all(len(v["flips"]["solved_to_failed"]) == MAX_FLIPS_LISTED + 1 for v in view)
    assert view[0]["flips"]["solved_to_failed"][-1] == "... 15 more"
    shown = [v for v in view if v["diff"].startswith("+x")]
    assert len(shown) == MAX_HISTORY_DIFFS and [v["round"] for v in shown] == [3, 4, 5]
    assert all(len(v["diff"]) <= MAX_DIFF_CHARS + 30 and "chars cut" in v["diff"] for v in shown)
    assert view[0]["diff"] == "(5001 characters, not shown)"
    assert view[0]["changes"][0]["parameters"] == {"knob": "max_result_chars", "value": 4000}
