"""What an evolution prints: the stage lines' outcome words and the final table (terminal).

Pure formatting of `evolution.json` (docs/internals.md); no git, model or file work.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

import pytest

from pytest_ecdysis.core.errors import shown
from pytest_ecdysis.gate.acceptance import accept_text
from pytest_ecdysis.gate.rates import confirmation_trials, run_rates

#: The words a round's `outcome` is printed with.
OUTCOME_TEXT = {
    "accepted": "accepted",
    "rejected": "rejected",
    "no_failures": "no failures: nothing to repair",
    "no_spec": "no spec",
    "no_new_evidence": "no new evidence: diagnosis not repeated",
    "no_change": "no change",
    "guard_rejected": "refused by the guard",
    "broken_candidate": "broken candidate",
    "inconclusive": "inconclusive (neither accepted nor rejected: may be tried again)",
}


class FinalTable:
    """Prints the final table at the very end of the terminal summary (after failures and the run's
    own `ecdysis` section), where the user looks last."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep("=", "ecdysis evolution")
        for line in summary_lines(self.doc)[1:]:
            terminalreporter.write_line(line)


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """The final table of an evolution (terminal): per round score before/after, outcome, pass^k, flips,
    editor calls, tokens, wall-clock; then test scores side by side, and the branch."""
    cap = (
        f", at most {doc['self_evolution_cap']} specs a round"
        if doc.get("strategy") == "self-evolution" and doc.get("self_evolution_cap")
        else f", {doc['proposals']} proposals a round"
        if doc.get("strategy") == "self-harness" and doc.get("proposals")
        else ""
    )
    out = [
        "",
        f"ecdysis evolution {doc.get('run_id')} ({doc.get('suite')}, strategy {doc.get('strategy')}{cap}, "
        f"editor {doc.get('editor')})",
        f"{'round':>5}  {'before':>7}  {'after':>7}  {'pass^k after':>12}  {'outcome':<17} {'p':>6}  "
        f"{'pairs':>9}  {'edits':>5}  {'tokens':>8}  {'wall s':>7}  flips (+solved / -lost)",
    ]
    for r in doc.get("rounds", []):
        fl = r.get("flips") or {}
        gained, lost = fl.get("failed_to_solved", []), fl.get("solved_to_failed", [])
        out.append(
            f"{r['round']:>5}  {fmt(r.get('score_before')):>7}  {fmt(r.get('score_after')):>7}  "
            f"{pass_hat(r.get('pass_hat_k_after')):>12}  {outcome_cell(r):<17} {p_value(r):>6}  "
            f"{pairs(r):>9}  {r.get('editor_calls', 0):>5}  "
            f"{r.get('tokens', {}).get('total', 0):>8}  "
            f"{r.get('wall_s', 0.0):>7.1f}  +{len(gained)} / -{len(lost)}"
            + (f" (lost: {shown(lost, 6)})" if lost else "")
        )
        for st in r.get("steps") or []:  # instance-level rounds (self-evolution): one line per patched spec
            out.append(
                f"{'step ' + str(st['step']):>12}  {fmt(st.get('score_before')):>7} -> "
                f"{fmt(st.get('score_after')):>7}  {st['outcome']:<17} {st.get('editor_calls', 0):>5}"
            )
    out += heldout_table_lines(doc)
    if doc.get("accept"):
        out.append(
            f"acceptance: {accept_text(doc['accept'])}; p = one-sided p-value of the paired test"
            + (" (sequential: anytime-valid)" if doc["accept"].get("rule") == "sequential" else "")
            + (
                " (adaptive: the final sign test's at the budget, else 1/e of the interim wealth); pairs: "
                "the final discordant trial pairs; wall s: every stage, looks included"
                if doc["accept"].get("rule") == "adaptive"
                else ""
            )
        )
        rates = run_rates(doc)
        if doc["accept"].get("rule") != "adaptive":
            out.append(f"  {rates}" if rates else "  its error rates were not measured at these settings")
        if doc["accept"].get("rule") == "sequential":
            out.append(f"  the confirmation spent {confirmation_trials(doc)} trial(s)")
        if doc["accept"].get("rule") == "adaptive":
            from pytest_ecdysis.gate.rates import look_trials, rule_rates

            out.append(f"  measured: {rule_rates(doc['accept'])}")
            out.append(f"  the looks spent {look_trials(doc):,} trial(s)")
    out += cost_section(doc)
    test = doc.get("test") or {}
    if test.get("start") and test.get("frozen"):
        out.append(
            f"test split, {test.get('trials')} trial(s) per task:  start {score_line(test['start'])}"
            f"   frozen {score_line(test['frozen'])}"
        )
        for model, slot in (test.get("transfer") or {}).items():
            if slot.get("start") and slot.get("frozen"):
                out.append(
                    f"  with {model}:  start {score_line(slot['start'])}   frozen {score_line(slot['frozen'])}"
                )
    if doc.get("validity"):
        from pytest_ecdysis.sim.truth.validity import summary_line

        out.append(summary_line(doc["validity"]))
    if doc.get("branch"):
        out.append(f"branch {doc['branch']}; view its diff: {doc.get('diff_command')}")
    elif doc.get("status") == "finished":  # a running (or interrupted) evolution has no branch verdict yet
        out.append("no round was accepted: no branch")
    cpu = (
        f", {doc['cpu_s']:.1f} CPU s (the controller and every process it waited for)"
        if doc.get("cpu_s") is not None
        else ""
    )
    out.append(
        f"evolution wall-clock {doc.get('wall_s', 0.0):.1f} s{cpu}; files in {doc.get('run_path', '')}".rstrip()
    )
    return out


def outcome_cell(row: Mapping[str, Any]) -> str:
    """The outcome column: `rejected/held-out` for a candidate the held-out check refused, else the
    outcome."""
    held = row.get("heldout")
    if isinstance(held, dict) and held.get("refused") and row.get("outcome") == "rejected":
        return "rejected/held-out"
    return str(row.get("outcome"))


def heldout_table_lines(doc: Mapping[str, Any]) -> list[str]:
    """Under the round table: one line per held-out check that refused a candidate or could not be made
    (`evolve.heldout`), e.g. `held-out: round 2: held-out check over 30 train / 20 held-out task(s): ...`."""
    out = []
    for r in doc.get("rounds") or []:
        for where, item in [(f"round {r.get('round')}", r)] + [
            (f"round {r.get('round')} step {st.get('step')}", st) for st in r.get("steps") or []
        ]:
            held = item.get("heldout")
            if isinstance(held, dict) and (held.get("refused") or not held.get("made")):
                out.append(f"held-out: {where}: {held.get('line')}")
    return out


def cost_section(doc: Mapping[str, Any]) -> list[str]:
    """The cost-by-role table of `report/cost.py` (empty for runs that recorded no cost)."""
    from pytest_ecdysis.report.cost import cost_lines

    return cost_lines(doc)


def compared_text(row: Mapping[str, Any]) -> str:
    """What a round (or step) was decided on: `candidate 0.733 vs the incumbent re-run beside it 0.800 (its
    earlier run: 0.767)`, `candidate 0.733 vs the incumbent's earlier run 0.700`, or `score 0.700` without a
    validated candidate."""
    if row.get("score_after") is None:
        return f"score {fmt(row.get('score_before'))}"
    inc = row.get("incumbent_run")
    if not isinstance(inc, dict):
        inc = {}
    if inc.get("rescored"):
        return (
            f"candidate {fmt(row.get('score_after'))} vs the incumbent re-run beside it "
            f"{fmt(row.get('score_before'))} (its earlier run: {fmt(inc.get('cached_score'))})"
        )
    return f"candidate {fmt(row.get('score_after'))} vs the incumbent's earlier run {fmt(row.get('score_before'))}"


def score_line(entry: dict[str, Any]) -> str:
    """`0.450 (pass^3 0.300, 31452 tokens/task)`: a suite score with pass^k for the largest k and, when
    recorded, the tokens per task (efficiency)."""
    hat = entry.get("pass_hat_k") or {}
    k = max(hat, key=int) if hat else None
    parts = ([f"pass^{k} {fmt(hat[k])}"] if k else []) + (
        [f"{entry['tokens_per_task']} tokens/task"] if entry.get("tokens_per_task") is not None else []
    )
    return f"{fmt(entry.get('suite_score'))}" + (f" ({', '.join(parts)})" if parts else "")


def pass_hat(hat: dict[str, Any] | None) -> str:
    """pass^k for the largest k of a `pass_hat_k` object, '-' without one."""
    if not hat:
        return "-"
    k = max(hat, key=int)
    return f"{fmt(hat[k])} (k={k})"


def pairs(row: dict[str, Any]) -> str:
    """The final discordant trial pairs a round (or step) was decided on, `+31/-12` (the adaptive and
    sequential rules: after every look), '-' for the other rules or without a decision."""
    d = row.get("decision") or {}
    if d.get("rule") not in ("adaptive", "sequential"):
        return "-"
    return f"+{d.get('wins', 0)}/-{d.get('losses', 0)}"


def p_value(row: dict[str, Any]) -> str:
    """The round's (or step's) p-value with 3 significant digits, '-' without a validated candidate."""
    p = (row.get("decision") or {}).get("p_value")
    return "-" if p is None else f"{p:.3g}"


def fmt(x: Any) -> str:
    """A score with three decimals, '-' for None."""
    return "-" if x is None else f"{float(x):.3f}"


def shorten(text: str, width: int) -> str:
    """`text` cut at a word boundary to at most `width` characters, with an ellipsis when cut."""
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" …") if text else ""


def caveats(doc: dict[str, Any]) -> list[str]:
    """What a reviewer of an evolution's branch must know beside its headline scores, from `evolution.json`:

    - each accepted round's deciding comparison when it was made against a re-run of the incumbent (the
      headline's "train score A -> B" takes A from the start's first run, so A -> B is not what was compared);
    - an accepted round whose paired test was not significant at the run's level (the strict rule accepts
      any rise, and a rise that size is often run-to-run noise);
    - under the simulated model, accepted edits its ground truth attributes to no cured quirk (`validity`).
    Shape: plain sentences, empty when there is nothing to say.
    """
    out = []
    for r in doc.get("rounds") or []:
        if not r.get("accepted"):
            continue
        inc = r.get("incumbent_run") if isinstance(r.get("incumbent_run"), dict) else {}
        if inc.get("rescored"):
            out.append(
                f"round {r.get('round')} was decided on {fmt(r.get('score_before'))} -> "
                f"{fmt(r.get('score_after'))}: the candidate against the incumbent re-run beside it "
                f"(that incumbent's earlier run scored {fmt(inc.get('cached_score'))})"
            )
        d = r.get("decision") or {}
        p, level = d.get("p_value"), d.get("level", (doc.get("accept") or {}).get("level", 0.05))
        if d.get("rule", "strict") == "strict" and p is not None and level is not None and p > level:
            out.append(
                f"round {r.get('round')} was accepted by the strict rule (any rise) although the paired "
                f"{d.get('method', 'sign')} test gives p={p:.3g} (+{d.get('wins', '?')}/-{d.get('losses', '?')} "
                f"tasks): a rise this size is often run-to-run noise; --ecdysis-accept paired accepts only a "
                "significant one"
            )
    v = doc.get("validity") or {}
    if v.get("noise"):
        out.append(
            f"the simulated model's ground truth attributes {v['noise']} of {v.get('accepted_edits')} "
            "accepted edit(s) to no quirk the edit cured (noise between the runs compared), "
            f"{v.get('systematic_fixes', 0)} to systematic fixes"
        )
    return out
