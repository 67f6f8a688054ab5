"""The measured error rates of the acceptance rules, as the verdict, round lines, PR body and HTML page quote them.

`decision_rates.json` (beside this module) is written by `benchmarks/bench_decisions.py --write-rates`
(docs/benchmarks.md, "Decision quality"): per rule, the share of no-op candidates accepted on the simulated
model's `noop` and `default` worlds (false acceptance), the share of decisions accepting the documented
systematic fix and a partial one (power), and the trials per decision, over the stated number of
decisions. They are the simulated model's figures, not a real model's: the text says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

RATES_FILE = Path(__file__).with_name("decision_rates.json")


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


def rates_short(accept: dict[str, Any] | None) -> str:
    """`false acceptance 1.2%, power 81% (bench_decisions, simulated model)`; '' when not measured."""
    m = measured(accept)
    if not m:
        return ""
    return (
        f"false acceptance {m['false_acceptance_noop']:.1%}, power {m['power_systematic_fix']:.0%} "
        "(bench_decisions, simulated model)"
    )
