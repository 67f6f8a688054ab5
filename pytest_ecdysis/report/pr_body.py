"""The Markdown PR body of an evolution run (`ecdysis pr-body RUN_DIR`, the evolve workflow's PR).

`render_pr_body(run_dir)` reads `evolution.json`, `summary.json` and `rounds/<n>/spec.json`: held-out
test score before/after with pass^k, one row per round, per-task flips and the spec of each accepted
round, tokens and cost. Text from outside goes through `safetext.markdown` (no control characters:
they would reach the reader's terminal or page). No pytest imports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_ecdysis.core import safetext
from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.core.secrets import redact
from pytest_ecdysis.report.summary import _cost, _fmt, read_json


def _score_of(value: Any) -> tuple[float | None, dict[str, Any]]:
    """(suite score, pass^k) of an `evolution.json` test entry: a number, a summary dict or a run path."""
    if isinstance(value, (int, float)):
        return float(value), {}
    if isinstance(value, dict):
        return value.get("suite_score"), value.get("pass_hat_k") or {}
    return None, {}


def _effect(decision: dict[str, Any] | None) -> str:
    """`+0.067 [+0.000, +0.133]` of a round's `decision`, '-' without one."""
    if not decision or decision.get("effect") is None:
        return "-"
    iv = decision.get("interval")
    return f"{decision['effect']:+.3f}" + (f" [{iv[0]:+.3f}, {iv[1]:+.3f}]" if iv else "")


def _p(decision: dict[str, Any] | None) -> str:
    p = (decision or {}).get("p_value")
    return "-" if p is None else f"{p:.3g} ({(decision or {}).get('method')})"


def _spec_markdown(spec: dict[str, Any]) -> list[str]:
    out = [f"> {spec.get('summary', '').strip()}", ""]
    for ch in spec.get("changes", []):
        out.append(
            f"- **{ch.get('component')}** (`{'`, `'.join(ch.get('files', []))}`): {ch.get('description')}"
        )
        if ch.get("trigger"):
            out.append(f"  - trigger: {ch['trigger']}")
        if ch.get("addresses"):
            out.append(f"  - addresses: {', '.join('`' + a + '`' for a in ch['addresses'])}")
        if ch.get("expected_effect"):
            out.append(f"  - expected effect: {ch['expected_effect']}")
        if ch.get("risks"):
            out.append(f"  - risks: {'; '.join(ch['risks'])}")
        if ch.get("guards"):
            out.append(f"  - guards: {'; '.join(ch['guards'])}")
    for la in spec.get("left_alone", []):
        out.append(f"- left alone: `{la.get('signature')}`: {la.get('reason')}")
    if spec.get("watch_tasks"):
        out.append(f"- watch tasks: {', '.join(spec['watch_tasks'])}")
    return out


def _cost_by_role(evo: dict[str, Any]) -> list[str]:
    """Tokens and USD per role, per round and in total (`report/cost.py`); empty for older runs."""
    from pytest_ecdysis.report.cost import cost_markdown

    table = cost_markdown(evo)
    return ["", "#### Cost by role", ""] + table if table else []


def render_pr_body(run_path: Path | str) -> str:
    """Markdown PR body from an evolution run directory (`evolution.json`, `rounds/<n>/spec.json`).

    Sections: held-out test score before/after with pass^k, one row per round (score before -> after,
    outcome), per-task flips of accepted rounds, the spec of each accepted round, tokens and cost.

    Raises:
        RunDirError: no readable `evolution.json` in `run_path`.
    """
    run_path = Path(run_path)
    if (run_path / "summary.json").is_file() and not (run_path / "evolution.json").exists():
        raise RunDirError(
            f"{run_path} is a run without evolution (no evolution.json): pr-body needs the run "
            "directory of an --ecdysis-evolve run; use `ecdysis show` or `ecdysis summary-md` here"
        )
    evo = read_json(run_path / "evolution.json")
    summary_file = run_path / "summary.json"
    summary = read_json(summary_file) if summary_file.exists() else {}
    rounds = evo.get("rounds", [])
    accepted = [r for r in rounds if r.get("accepted")]
    out = ["## pytest-ecdysis: harness evolution", ""]
    model = summary.get("model") or ""
    out.append(
        f"run `{run_path.name}` · model `{model or '?'}` · harness `{summary.get('harness_id', '?')}` · "
        f"{len(accepted)} of {len(rounds)} round(s) accepted · branch `{evo.get('branch') or 'none'}`"
    )
    if model.startswith("sim"):
        out += [
            "",
            "_Simulated model (no real LLM): the figures show the loop working, not a model's quality._",
        ]

    from pytest_ecdysis.report.evolution import caveats

    if notes := caveats(evo):
        out += ["", "### Read before merging", ""] + [f"- {c}" for c in notes]

    test = evo.get("test") or {}
    if test:
        (s0, p0), (s1, p1) = _score_of(test.get("start")), _score_of(test.get("frozen"))
        ks = sorted(set(p0) | set(p1), key=int)
        out += [
            "",
            f"### Held-out test split ({test.get('trials', '?')} trial(s) per task)",
            "",
            "| " + " | ".join(["harness", "score", *(f"pass^{k}" for k in ks), "tokens/task"]) + " |",
            "|---|---:|" + "---:|" * (len(ks) + 1),
        ]
        for label, which, sc, hat in (
            ("before (start)", "start", s0, p0),
            ("after (frozen)", "frozen", s1, p1),
        ):
            entry = test.get(which)
            per_task = entry.get("tokens_per_task") if isinstance(entry, dict) else None
            cells = [
                label,
                _fmt(sc),
                *(_fmt(hat.get(k)) for k in ks),
                "–" if per_task is None else str(per_task),
            ]
            out.append("| " + " | ".join(cells) + " |")
        if s0 is not None and s1 is not None:
            out += ["", f"change on test: {s1 - s0:+.3f}"]
        lost = (test.get("regressions") or {}).get("solved_to_failed") or []
        if lost:
            out += [
                "",
                f"**Held-out regressions**: the frozen harness lost {len(lost)} test task(s) the start "
                f"solved in every trial: {', '.join(lost)}",
            ]
        gap = test.get("gap") or {}
        if gap.get("said"):
            out += ["", f"**Train-test gap**: {gap['line'].removeprefix('train-test gap: ')}"]
        from pytest_ecdysis.gate.heldout import heldout_summary

        held = heldout_summary(evo)
        if held is not None and held["refused"] + held["passed"]:
            out += [
                "",
                f"**Held-out checks**: {held['passed']} passed, {held['refused']} refused (a train gain not "
                "matched on these test tasks is not committed); the test split decided them, so the figures "
                "above are those of a selection set, not an untouched estimate.",
            ]
            out += [f"- round {c['round']} refused: {c['line']}" for c in held["checks"] if c.get("refused")]
        for name, entry in (test.get("transfer") or {}).items():
            (t0, _), (t1, _) = _score_of((entry or {}).get("start")), _score_of((entry or {}).get("frozen"))
            out.append(f"- transfer to `{name}`: {_fmt(t0)} -> {_fmt(t1)}")

    out += ["", "### Rounds (train split)", ""]
    if evo.get("accept"):
        from pytest_ecdysis.gate.acceptance import accept_text
        from pytest_ecdysis.gate.rates import confirmation_trials, look_trials, rule_rates, run_rates

        rule = evo["accept"].get("rule")
        rates = run_rates(evo) or "its error rates were not measured at these settings (docs/benchmarks.md)"
        if rule == "adaptive":
            rates = f"measured: {rule_rates(evo['accept'])}"
        spent = (
            f" The confirmation spent {confirmation_trials(evo)} trial(s)."
            if rule == "sequential"
            else f" The looks spent {look_trials(evo):,} trial(s)."
            if rule == "adaptive"
            else ""
        )
        accept = {**evo["accept"], "budget": (evo.get("adaptive") or {}).get("budget")}
        out += [
            f"Acceptance: {accept_text(accept)}; {rates}.{spent} Effect: mean per-task reward "
            "difference (candidate - incumbent) with its bootstrap interval over tasks; p: one-sided p-value "
            'of "no improvement".',
            "",
        ]
    out += [
        "| round | strategy | score before | score after | outcome | effect [interval] | p | "
        "editor calls | tokens | wall s |",
        "|---:|---|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rounds:
        out.append(
            f"| {r.get('round')} | {r.get('strategy')} | {_fmt(r.get('score_before'))} | "
            f"{_fmt(r.get('score_after'))} | {r.get('outcome')} | {_effect(r.get('decision'))} | "
            f"{_p(r.get('decision'))} | {r.get('editor_calls', 0)} | "
            f"{(r.get('tokens') or {}).get('total', 0)} | {r.get('wall_s', 0):.1f} |"
        )

    for r in accepted:
        n = r.get("round")
        fl = r.get("flips") or {}
        out += ["", f"### Round {n} (accepted)", ""]
        out.append(f"- failed -> solved: {', '.join(fl.get('failed_to_solved', [])) or 'none'}")
        out.append(f"- solved -> failed: {', '.join(fl.get('solved_to_failed', [])) or 'none'}")
        spec_file = run_path / "rounds" / str(n) / "spec.json"
        if spec_file.exists():
            out += ["", "Modification spec:", ""] + _spec_markdown(read_json(spec_file))
        else:
            out.append(f"- (no spec.json recorded in rounds/{n}/)")

    tokens = {"prompt": 0, "completion": 0, "total": 0}
    for r in rounds:
        for k in tokens:
            tokens[k] += int((r.get("tokens") or {}).get(k, 0))
    from pytest_ecdysis.core.metrics import cost_usd, load_prices

    diag_model = summary.get("diagnosis_model") or model
    cost, note = cost_usd(diag_model, tokens, load_prices()) if diag_model else (None, "unknown model")
    cost_text = (
        "0 (simulated model)" if note == "simulated" else ("unknown" if cost is None else f"${cost:.4f}")
    )
    out += [
        "",
        "### Cost",
        "",
        f"diagnosis and editing tokens {tokens['total']} (prompt {tokens['prompt']}, completion "
        f"{tokens['completion']}) · estimated cost {cost_text} · evolution wall-clock "
        f"{evo.get('wall_s', 0):.1f} s",
    ]
    if summary.get("cost_usd") is not None or summary.get("cost_note"):
        out.append(
            f"task runs of the starting harness: tokens {(summary.get('tokens') or {}).get('total', 0)} · "
            f"cost {_cost(summary)}"
        )
    out += _cost_by_role(evo)
    out += [
        "",
        "_Generated by pytest-ecdysis. Review the diff like any other change; the score is noisy "
        "(reruns of an unchanged harness move by several points)._",
    ]
    return redact(safetext.markdown("\n".join(out) + "\n"))
