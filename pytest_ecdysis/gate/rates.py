"""The measured error rates of the acceptance rules, as the verdict, round lines, PR body and HTML page quote them.

`decision_rates.json` (beside this module) is written by `benchmarks/bench_decisions.py --write-rates`
(docs/benchmarks.md, "Decision quality"): per rule, the share of no-op candidates accepted on the simulated
model's `noop` and `default` worlds (false acceptance), the share of decisions accepting the documented
systematic fix and a partial one (power), and the trials per decision, over the stated number of
decisions. They are the simulated model's figures, not a real model's: the text says so.

`leaderboard_rates.json` (beside it) is written by `benchmarks/bench_decisions.py --world leaderboard
--write-rates`: every rule's accept / reject / inconclusive shares and trials per decision on real τ²
noise (the leaderboard's per-task histograms), per domain, effect shape and gain; `leaderboard_text` quotes
a rule's figures from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

RATES_FILE = Path(__file__).with_name("decision_rates.json")
LEADERBOARD_FILE = Path(__file__).with_name("leaderboard_rates.json")


@cache
def _table() -> dict[str, Any]:
    try:
        return json.loads(RATES_FILE.read_text())
    except (OSError, ValueError):
        return {}


def rule_key(accept: dict[str, Any] | None) -> str | None:
    """The benchmark's row name of a run's `accept` settings (`strict`, `paired/sign`, `paired/sign+extra`,
    `sequential`, ...); None without settings."""
    if not accept or not accept.get("rule"):
        return None
    rule = accept["rule"]
    if rule != "paired":
        return rule
    return f"paired/{accept.get('method') or 'sign'}" + ("+extra" if accept.get("extra_trials") else "")


def measured(accept: dict[str, Any] | None) -> dict[str, Any] | None:
    """The benchmark's figures for these settings (`false_acceptance_noop`, `false_acceptance_default`,
    `power_systematic_fix`, `power_partial_fix`, `trials_per_decision`, `decisions`; shares in [0, 1]), or
    None when the rule (or its level: the table is at 0.05) was not measured."""
    key = rule_key(accept)
    if key is None or abs(float((accept or {}).get("level") or 0.05) - 0.05) > 1e-9:
        return None
    return (_table().get("rules") or {}).get(key)


def rates_text(accept: dict[str, Any] | None) -> str:
    """`measured on the simulated model: false acceptance 1.2% (noop), power 81% (systematic fix), 35%
    (partial fix), 95 trials per decision (source)`; '' when not measured."""
    m = measured(accept)
    if not m:
        return ""
    return (
        f"measured on the simulated model: false acceptance {m['false_acceptance_noop']:.1%} (noop world), "
        f"{m['false_acceptance_default']:.1%} (no-op candidates on default); power "
        f"{m['power_systematic_fix']:.0%} (systematic fix), {m['power_partial_fix']:.0%} (partial fix); "
        f"{m['trials_per_decision']:.0f} trials per decision; {m['decisions']} decisions per figure "
        f"({_table().get('source', 'benchmarks/bench_decisions.py')})"
    )


def run_rates(doc: Mapping[str, Any]) -> str:
    """`rates_text` of an `evolution.json` document's settings (`accept` and `accept_extra_trials`)."""
    accept = doc.get("accept")
    return rates_text({**accept, "extra_trials": doc.get("accept_extra_trials")} if accept else None)


def confirmation_trials(doc: Mapping[str, Any]) -> int:
    """Trials the confirmation looks spent over all rounds, steps and proposals (both harnesses)."""

    def of(row: dict[str, Any]) -> int:
        return int((row.get("confirmation") or {}).get("trials", 0)) + sum(
            of(x) for x in (row.get("steps") or []) + (row.get("proposals") or []) if isinstance(x, dict)
        )

    return sum(of(r) for r in doc.get("rounds") or [])


def look_trials(doc: Mapping[str, Any]) -> int:
    """Trials the adaptive rule's looks spent over all rounds, steps and proposals (both harnesses)."""

    def of(row: dict[str, Any]) -> int:
        return int((row.get("looks") or {}).get("trials", 0)) + sum(
            of(x) for x in (row.get("steps") or []) + (row.get("proposals") or []) if isinstance(x, dict)
        )

    return sum(of(r) for r in doc.get("rounds") or [])


def rates_short(accept: dict[str, Any] | None) -> str:
    """`false acceptance 1.2%, power 81% (bench_decisions, simulated model)`; '' when not measured."""
    m = measured(accept)
    if not m:
        return ""
    return (
        f"false acceptance {m['false_acceptance_noop']:.1%}, power {m['power_systematic_fix']:.0%} "
        "(bench_decisions, simulated model)"
    )


@cache
def _leaderboard() -> dict[str, Any]:
    try:
        return json.loads(LEADERBOARD_FILE.read_text())
    except (OSError, ValueError):
        return {}


def leaderboard_text(rule: str) -> str:
    """`on τ² leaderboard noise (train splits, 200 decisions a cell): false acceptance <= 4.5%; accepts +10
    points 97% (airline), +5 points 84% (retail), 86% (telecom); rejects a +5 point gain <= 5.0%` (the worst
    of the two effect shapes for each); '' when the rule was not measured there."""
    rows = [r for r in _leaderboard().get("rows") or [] if r.get("rule") == rule]
    if not rows:
        return ""

    def worst(key: str, gain: float, domain: str | None = None, pick: Any = min) -> float | None:
        xs = [r[key] for r in rows if abs(r["gain"] - gain) < 1e-9 and domain in (None, r["domain"])]
        return pick(xs) if xs else None

    fa, rej = worst("accept", 0.0, pick=max), worst("reject", 0.05, pick=max)
    targets = (("airline", 0.10), ("retail", 0.05), ("telecom", 0.05))
    power = [
        f"+{100 * g:.0f} points {p:.0%} ({d})" for d, g in targets if (p := worst("accept", g, d)) is not None
    ]
    n = rows[0].get("decisions", "?")
    return (
        f"on τ² leaderboard noise (train splits, {n} decisions a cell): false acceptance <= {fa:.1%}; accepts "
        f"{', '.join(power)}; rejects a +5 point gain <= {rej:.1%}"
    )


def leaderboard_short(rule: str) -> str:
    """`false acceptance <= 4.5%, power 84-98% at the targets (bench_decisions, τ² leaderboard noise)`; ''
    when the rule was not measured there."""
    rows = [r for r in _leaderboard().get("rows") or [] if r.get("rule") == rule]
    if not rows:
        return ""
    fa = max((r["accept"] for r in rows if abs(r["gain"]) < 1e-9), default=0.0)
    targets = {"airline": 0.10, "retail": 0.05, "telecom": 0.05}
    power = [r["accept"] for r in rows if abs(r["gain"] - targets.get(r["domain"], -1)) < 1e-9]
    span = f", power {min(power):.0%}-{max(power):.0%} at the targets" if power else ""
    return f"false acceptance <= {fa:.1%}{span} (bench_decisions, τ² leaderboard noise)"


def rule_rates(accept: dict[str, Any] | None) -> str:
    """Both measured worlds of a run's rule, for the verdict: the τ² leaderboard noise's figures
    (`leaderboard_text`) and the simulated model's (`rates_text`), each said as not measured when absent."""
    if not accept or not accept.get("rule"):
        return ""
    board = leaderboard_text(rule_key(accept) or "") or "not measured on τ² leaderboard noise"
    sim = rates_text(accept) or "not measured on the simulated model at these settings"
    return f"{board}; {sim}"
