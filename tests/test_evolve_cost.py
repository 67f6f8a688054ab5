"""Cost per role (`evolve/cost.py`, `report/cost.py`): tokens and USD of every role, read from a run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_ecdysis.evolve import cost
from pytest_ecdysis.report.cost import cost_lines, cost_markdown

PRICES = {
    "agent-m": {"prompt_per_mtok": 1.0, "completion_per_mtok": 2.0},
    "diag-m": {"prompt_per_mtok": 10.0, "completion_per_mtok": 20.0},
}


def tok(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt": prompt, "completion": completion, "total": prompt + completion}


def summary(agent: dict, user: dict, model: str = "agent-m", user_model: str = "sim") -> dict:
    return {"model": model, "user_model": user_model, "tokens": agent, "user_tokens": user, "n_trials": 2}


def write(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run with one round (two passes of roles, a moderator, an editor call, a candidate, an incumbent
    re-run and confirmation trials) and a test split."""
    r1 = tmp_path / "rounds" / "1"
    lines = [
        {"role": role, "pass": 1, "tokens": tok(1000, 100)} for role in ("analyst", "critic", "engineer")
    ]
    lines.append({"role": "moderator", "pass": None, "tokens": tok(2000, 500)})
    write(r1 / "transcript.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    write(r1 / "edit.json", {"tokens": tok(3000, 1000), "calls": 1})
    write(r1 / "run-r1" / "summary.json", summary(tok(5000, 500), tok(700, 70)))
    write(r1 / "incumbent" / "run-r1i" / "summary.json", summary(tok(4000, 400), tok(600, 60)))
    write(r1 / "extra" / "run-r1x" / "summary.json", summary(tok(1000, 100), tok(0, 0)))
    write(tmp_path / "test" / "start" / "run-test-start" / "summary.json", summary(tok(9000, 900), tok(0, 0)))
    return tmp_path


def test_round_cost_per_role_and_stage(run_dir: Path) -> None:
    """Each role's tokens and USD priced with its own model; trial tokens split by stage; the simulated
    user costs 0."""
    block = cost.round_cost(run_dir, 1, "diag-m", PRICES)
    roles = block["roles"]
    assert roles["analyst"]["total"] == 1100 and roles["analyst"]["calls"] == 1
    assert roles["analyst"]["usd"] == pytest.approx((1000 * 10 + 100 * 20) / 1e6)
    assert roles["moderator"]["usd"] == pytest.approx((2000 * 10 + 500 * 20) / 1e6)
    assert roles["editor"]["usd"] == pytest.approx((3000 * 10 + 1000 * 20) / 1e6)
    assert roles["agent"]["total"] == 5500 + 4400 + 1100
    assert roles["agent"]["usd"] == pytest.approx((10000 * 1 + 1000 * 2) / 1e6)
    assert roles["user"]["usd"] == 0.0
    assert block["stages"] == {"validation": 5500 + 770, "rescore": 4400 + 660, "confirmation": 1100}
    assert block["tokens"] == 1100 * 3 + 2500 + 4000 + 11000 + 770 + 660
    assert block["usd"] == pytest.approx(sum(r["usd"] for r in roles.values()))
    assert list(roles)[:4] == ["agent", "user", "analyst", "critic"]


def test_evolution_cost_totals_and_unknown_is_none_said_once(run_dir: Path) -> None:
    """The total adds the start run(s), the rounds and the test split; a model without a price makes the
    USD of its role and of the total unknown (None), and is named once."""
    doc = {
        "model": "agent-m",
        "cost_start_runs": [summary(tok(8000, 800), tok(0, 0))] * 2,
        "rounds": [{"round": 1, "cost": cost.round_cost(run_dir, 1, "unpriced-m", PRICES)}],
    }
    total = cost.evolution_cost(doc, run_dir, "unpriced-m", PRICES)
    assert total["start"]["tokens"] == 2 * 8800 and total["test"]["stages"] == {"test": 9900}
    assert total["roles"]["agent"]["total"] == 2 * 8800 + 11000 + 9900
    assert total["roles"]["agent"]["usd"] == pytest.approx(
        (2 * 8000 + 10000 + 9000 + 2 * (1600 + 1000 + 900)) / 1e6
    )
    assert total["roles"]["analyst"]["usd"] is None and total["usd"] is None
    assert len(total["unknown"]) == 1 and "unpriced-m" in total["unknown"][0]
    doc["cost"] = total
    lines = cost_lines(doc)
    assert sum("unpriced-m" in line for line in lines) == 1
    row = next(line for line in lines if line.startswith("round 1"))
    assert row.split()[-1] == "?" and "1.1k" in row
    assert any(line.startswith("total") for line in lines)
    assert "| **total** |" in "\n".join(cost_markdown(doc))


def test_simulated_model_costs_sim_not_unknown(run_dir: Path) -> None:
    doc = {"model": "sim", "cost_start_runs": [summary(tok(10, 1), tok(10, 1), model="sim")], "rounds": []}
    doc["rounds"] = [{"round": 1, "cost": cost.round_cost(run_dir, 1, "sim", {})}]
    doc["cost"] = cost.evolution_cost(doc, run_dir, "sim", {})
    assert doc["cost"]["usd"] is None  # the fixture's sub-runs name agent-m, unpriced here
    only_sim = {
        "model": "sim",
        "cost_start_runs": [summary(tok(10, 1), tok(10, 1), model="sim")],
        "rounds": [],
    }
    only_sim["cost"] = cost.evolution_cost(only_sim, run_dir / "nothing", "sim", {})
    assert only_sim["cost"]["usd"] == 0.0 and cost_lines(only_sim)[2].split()[-1] == "sim"


def test_html_page_and_pr_body_show_the_cost_table(run_dir: Path) -> None:
    """The page of an evolution run has the cost-by-role table (one row per part, USD '?' for an unpriced
    model), and the PR body its Markdown twin."""
    from pytest_ecdysis.report.html import render
    from pytest_ecdysis.report.pr_body import render_pr_body

    doc = {
        "run_id": "r",
        "model": "agent-m",
        "status": "finished",
        "rounds": [],
        "start": {"score": 0.5},
        "cost_start_runs": [summary(tok(8000, 800), tok(0, 0))],
    }
    doc["rounds"] = [
        {
            "round": 1,
            "outcome": "rejected",
            "score_before": 0.5,
            "score_after": 0.5,
            "cost": cost.round_cost(run_dir, 1, "diag-m", PRICES),
        }
    ]
    doc["cost"] = cost.evolution_cost(doc, run_dir, "diag-m", PRICES)
    write(run_dir / "evolution.json", doc)
    write(
        run_dir / "summary.json", {"run_id": "r", "suite": "s", "model": "agent-m", "tokens": tok(8000, 800)}
    )
    page = render(run_dir)
    assert '<h3 id="cost">Cost by role</h3>' in page
    assert "<td>round 1</td>" in page and "<td>total</td>" in page
    body = render_pr_body(run_dir)
    assert "#### Cost by role" in body and "| round 1 |" in body
    total_usd = f"${doc['cost']['usd']:.4g}"
    assert total_usd in page and total_usd in body
