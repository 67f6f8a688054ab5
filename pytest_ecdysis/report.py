"""Renderings of a run: `junit.xml`, the `ecdysis` terminal section, Markdown summaries and PR bodies.

Everything here reads plain data (summary dicts, TrialResults, groups, run directories) and returns
text or writes one file; no pytest imports. Used by `session` at the end of a run, by the `ecdysis`
CLI, by the gate workflow (job summary) and by the evolution loop (`render_pr_body`).

Text from outside (error messages, tool results, signatures, node ids) goes through `safetext` for the
format it lands in: `junit.xml` is always well-formed XML, terminal lines and Markdown carry no control
characters (issue 11 case 3).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from junitparser import Error, Failure, JUnitXml, Properties, Property, Skipped, TestCase, TestSuite

from . import safetext
from .errors import RunDirError
from .metrics import is_success
from .records import TrialResult

TOP_GROUPS = 5


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _cell(text: str) -> str:
    """Escape a table cell's pipes (GitHub Markdown splits cells on them, even in code spans)."""
    return text.replace("|", "\\|")


def _cost(summary: dict[str, Any]) -> str:
    if summary.get("cost_note") == "simulated":
        return "0 (simulated model)"
    if summary.get("cost_usd") is None:
        return "unknown"
    return f"${summary['cost_usd']:.4f}"


# --------------------------------------------------------------------------- junit.xml


def _user_tokens(summary: dict[str, Any], sep: str) -> str:
    """The user simulator's tokens (counted in the cost), shown only when it spent any."""
    total = (summary.get("user_tokens") or {}).get("total", 0)
    return f"{sep}user simulator tokens {total}" if total else ""


def write_junit(path: Path, trials: list[TrialResult], missing: list[str], threshold: float, *,
                not_run: list[str] | None = None, stopped: str | None = None) -> Path:
    """`junit.xml`: one `<testsuite>` per suite, one `<testcase>` per trial with properties
    `reward`, `termination_reason`, `task_id`, `trial`, `suite`, `harness_id`; failures for reward < λ,
    errors for infrastructure errors and for missing cases (suite `missing`); cases pytest never ran because
    it stopped early (`not_run`, reason `stopped`) are skipped (suite `not_run`). Every text is made XML-safe
    (`safetext.xml`). Raises OSError when `path` cannot be written."""
    x = safetext.xml
    xml = JUnitXml(name="pytest-ecdysis")
    suites: dict[str, TestSuite] = {}
    for t in trials:
        ts = suites.get(t.suite)
        if ts is None:
            ts = suites[t.suite] = TestSuite(x(t.suite))
        module, _, name = x(t.nodeid or f"{t.suite}::{t.task_id}-t{t.trial}").rpartition("::")
        case = TestCase(name or x(t.nodeid), classname=module.replace("/", ".").removesuffix(".py"), time=t.wall_s)
        props = Properties()
        for key, value in (("reward", "" if t.reward is None else f"{t.reward:g}"),
                           ("termination_reason", t.termination_reason), ("task_id", t.task_id),
                           ("trial", str(t.trial)), ("suite", t.suite), ("harness_id", t.harness_id)):
            props.add_property(Property(key, x(value)))
        case.append(props)
        if t.is_infra_error:
            case.result = [Error(x(t.error or t.termination_reason), x(t.termination_reason))]
        elif not is_success(t.reward, threshold):
            comps = ", ".join(f"{k}={v:g}" for k, v in t.components.items()) or "none"
            case.result = [Failure(x(f"reward {_fmt(t.reward)} < λ {threshold:g}; components {comps}; "
                                     f"termination {t.termination_reason}"), "below_threshold")]
        ts.append(case)  # add_testcase recounts the suite each time (quadratic)
    if missing:
        ts = suites["missing"] = TestSuite("missing")
        for nodeid in missing:
            module, _, name = x(nodeid).rpartition("::")
            case = TestCase(name or x(nodeid), classname=module.replace("/", ".").removesuffix(".py"))
            case.result = [Error("the case was collected but never reported a result "
                                 "(crashed worker or unserialisable report)", "missing")]
            ts.append(case)
    if not_run:
        ts = suites["not_run"] = TestSuite("not_run")
        for nodeid in not_run:
            module, _, name = x(nodeid).rpartition("::")
            case = TestCase(name or x(nodeid), classname=module.replace("/", ".").removesuffix(".py"))
            case.result = [Skipped(x(f"not run: pytest stopped early ({stopped or 'interrupted'})"), "not_run")]
            ts.append(case)
    for ts in suites.values():
        ts.update_statistics()
        xml.add_testsuite(ts)
    xml.update_statistics()
    xml.write(str(path), pretty=len(trials) <= 2000)  # pretty-printing costs ~1 ms per case
    return path


# --------------------------------------------------------------------------- summaries


def score_rows(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, figures) rows: one per suite, then 'all' when more than one suite."""
    by_suite = summary.get("by_suite") or {}
    rows = list(by_suite.items())
    if len(rows) != 1:
        rows.append(("all", summary))
    return rows


def _ks(summary: dict[str, Any]) -> list[str]:
    return sorted((summary.get("pass_hat_k") or {}).keys(), key=int)


#: where the terminal section's weak-pass line points (`ecdysis show` lists them itself).
WEAK_PASSES_HINT = "`ecdysis show RUN_DIR` lists them"


def summary_lines(summary: dict[str, Any], groups: list[dict[str, Any]], gate: dict[str, Any] | None = None,
                  problems: list[str] | None = None, *, weak_hint: str | None = WEAK_PASSES_HINT) -> list[str]:
    """The plain-text summary the terminal section and `ecdysis show` print (control characters escaped).

    `weak_hint`: where the weak passes are listed (None: no pointer; `ecdysis show` says "listed below")."""
    ks = _ks(summary)
    head = f"{'suite':<28}{'tasks':>6}{'trials':>7}{'score':>7}" + "".join(f"{'pass^' + k:>8}" for k in ks)
    head += f"{'solved':>7}{'infra':>6}"
    lines = [f"run {summary.get('run_id')}  split {summary.get('split')}  model {summary.get('model')}  "
             f"harness {summary.get('harness_id')}", head]
    for label, s in score_rows(summary):
        row = f"{label:<28}{s.get('n_tasks', 0):>6}{s.get('n_trials', 0):>7}{_fmt(s.get('suite_score')):>7}"
        row += "".join(f"{_fmt((s.get('pass_hat_k') or {}).get(k)):>8}" for k in ks)
        row += f"{s.get('n_solved', 0):>7}{s.get('n_infra_errors', 0):>6}"
        lines.append(row)
    tok = summary.get("tokens") or {}
    lines.append(f"failures {summary.get('n_failures', 0)}  tokens {tok.get('total', 0)} "
                 f"(prompt {tok.get('prompt', 0)}, completion {tok.get('completion', 0)}){_user_tokens(summary, '  ')}  "
                 f"cost {_cost(summary)}  wall {summary.get('wall_s', 0):.1f} s")
    if summary.get("limits"):
        lines.append(limits_line(summary["limits"]))
    if summary.get("kept_out"):
        lines.append("failures kept out of the evidence: " + ", ".join(
            f"{n} {why.replace('_', ' ')}" for why, n in summary["kept_out"].items()))
    if summary.get("n_weak_passes"):
        lines.append(f"weak passes: {summary['n_weak_passes']} (a communicate value under 3 characters or no tool "
                     f"call{'; ' + weak_hint if weak_hint else ''})")
    if summary.get("suspect_tasks"):
        lines.append(f"suspect tasks (scored, kept out of evidence): {', '.join(summary['suspect_tasks'])}")
    if groups:
        lines.append(f"top failure groups ({len(groups)} in all, cross-task first):")
        for g in groups[:TOP_GROUPS]:
            tag = "cross-task" if g.get("cross_task") else "single    "
            lines.append(f"  {tag} {len(g['records']):>3} rec {len(g['tasks']):>3} tasks  {g['signature']}")
    if summary.get("stopped"):
        names = summary.get("not_run") or []
        lines.append(f"stopped early ({summary['stopped']}): {len(names)} case(s) not run"
                     + (f": {', '.join(names[:10])}" + (f" and {len(names) - 10} more" if len(names) > 10 else "")
                        if names else ""))
    for p in problems or []:
        lines.append(f"PROBLEM: {p}")
    if gate:
        lines.append(gate["headline"])
        lines.extend(f"  - {r}" for r in gate.get("reasons", [])
                     if not gate.get("passed") and r not in gate["headline"])  # a refusal's headline has them
    return [safetext.terminal(line) for line in lines]


def limits_line(limits: dict[str, Any]) -> str:
    """`limits: call 60 s, retries 3, trial 900 s, diagnosis 1800 s, editor 900 s` (`summary.json` `limits`)."""
    return (f"limits: call {limits.get('call_timeout_s'):g} s, retries {limits.get('max_retries')}, "
            f"trial {limits.get('trial_budget_s'):g} s, diagnosis {limits.get('diagnosis_budget_s'):g} s, "
            f"editor {limits.get('editor_budget_s'):g} s")


def summary_markdown(summary: dict[str, Any], groups: list[dict[str, Any]], gate: dict[str, Any] | None = None,
                     problems: list[str] | None = None) -> str:
    """The Markdown summary (GitHub job summary): score table, top groups, problems, gate verdict (control
    characters escaped)."""
    ks = _ks(summary)
    out = [f"## pytest-ecdysis run `{summary.get('run_id')}`", ""]
    if gate:
        out += [f"**{gate['headline']}**", ""]
        if not gate.get("passed") and gate.get("reasons"):
            out += [f"- {r}" for r in gate["reasons"] if r not in gate["headline"]] + [""]
    out.append(f"split `{summary.get('split')}` · model `{summary.get('model')}` · harness "
               f"`{summary.get('harness_id')}` · λ {summary.get('threshold')}")
    if str(summary.get("model", "")).startswith("sim"):
        out.append("\n_Simulated model (no real LLM): figures show the pipeline, not a model's quality._")
    out += ["", "| suite | tasks | trials | score | " + " | ".join(f"pass^{k}" for k in ks) + " | solved | infra |",
            "|---|---:|---:|---:|" + "---:|" * len(ks) + "---:|---:|"]
    for label, s in score_rows(summary):
        out.append(f"| {label} | {s.get('n_tasks', 0)} | {s.get('n_trials', 0)} | {_fmt(s.get('suite_score'))} | "
                   + " | ".join(_fmt((s.get('pass_hat_k') or {}).get(k)) for k in ks)
                   + f" | {s.get('n_solved', 0)} | {s.get('n_infra_errors', 0)} |")
    tok = summary.get("tokens") or {}
    out += ["", f"failures {summary.get('n_failures', 0)} · tokens {tok.get('total', 0)}{_user_tokens(summary, ' · ')}"
            f" · cost {_cost(summary)} · "
            f"wall {summary.get('wall_s', 0):.1f} s"]
    if summary.get("suspect_tasks"):
        out += ["", "suspect tasks (scored, kept out of evidence): "
                + ", ".join(f"`{t}`" for t in summary["suspect_tasks"])]
    if groups:
        out += ["", "| failure group | cross-task | records | tasks |", "|---|---|---:|---:|"]
        out += [f"| `{_cell(g['signature'])}` | {'yes' if g.get('cross_task') else 'no'} | {len(g['records'])} | "
                f"{len(g['tasks'])} |" for g in groups[:TOP_GROUPS]]
    if summary.get("stopped"):
        out += ["", f"**Stopped early** ({summary['stopped']}): {len(summary.get('not_run') or [])} case(s) not run."]
    if problems:
        out += [""] + [f"> **Problem:** {' '.join(str(p).splitlines())}" for p in problems]
    return safetext.markdown("\n".join(out) + "\n")


def append_step_summary(markdown: str) -> Path | None:
    """Append to `$GITHUB_STEP_SUMMARY` when set; returns its path (None when unset)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(markdown + "\n")
    return Path(target)


# --------------------------------------------------------------------------- run directories


def read_json(path: Path) -> Any:
    """Read a run-directory JSON file. Raises RunDirError naming the file."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunDirError(f"{path} does not exist: is {path.parent} a pytest-ecdysis run directory?") from None
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from None


def read_run(run_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(summary, groups) of a run directory."""
    summary = read_json(Path(run_path) / "summary.json")
    groups_file = Path(run_path) / "groups.json"
    groups = read_json(groups_file).get("groups", []) if groups_file.exists() else []
    return summary, groups


def flips(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[str]]:
    """Per-task flips between two summaries' `tasks` (solved -> failed, failed -> solved)."""
    a, b = before.get("tasks", {}), after.get("tasks", {})
    common = sorted(set(a) & set(b))
    return {"solved_to_failed": [k for k in common if a[k]["solved"] and not b[k]["solved"]],
            "failed_to_solved": [k for k in common if not a[k]["solved"] and b[k]["solved"]],
            "only_before": sorted(set(a) - set(b)), "only_after": sorted(set(b) - set(a))}


# --------------------------------------------------------------------------- PR body


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
    return "-" if p is None else f"{p:.3g} ({decision.get('method')})"


def _spec_markdown(spec: dict[str, Any]) -> list[str]:
    out = [f"> {spec.get('summary', '').strip()}", ""]
    for ch in spec.get("changes", []):
        out.append(f"- **{ch.get('component')}** (`{'`, `'.join(ch.get('files', []))}`): {ch.get('description')}")
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


def render_pr_body(run_path: Path | str) -> str:
    """Markdown PR body from an evolution run directory (`evolution.json`, `rounds/<n>/spec.json`).

    Sections: held-out test score before/after with pass^k, one row per round (score before -> after,
    outcome), per-task flips of accepted rounds, the spec of each accepted round, tokens and cost.

    Raises:
        RunDirError: no readable `evolution.json` in `run_path`.
    """
    run_path = Path(run_path)
    if (run_path / "summary.json").is_file() and not (run_path / "evolution.json").exists():
        raise RunDirError(f"{run_path} is a run without evolution (no evolution.json): pr-body needs the run "
                          "directory of an --ecdysis-evolve run; use `ecdysis show` or `ecdysis summary-md` here")
    evo = read_json(run_path / "evolution.json")
    summary_file = run_path / "summary.json"
    summary = read_json(summary_file) if summary_file.exists() else {}
    rounds = evo.get("rounds", [])
    accepted = [r for r in rounds if r.get("accepted")]
    out = ["## pytest-ecdysis: harness evolution", ""]
    model = summary.get("model") or ""
    out.append(f"run `{run_path.name}` · model `{model or '?'}` · harness `{summary.get('harness_id', '?')}` · "
               f"{len(accepted)} of {len(rounds)} round(s) accepted · branch `{evo.get('branch') or 'none'}`")
    if model.startswith("sim"):
        out += ["", "_Simulated model (no real LLM): the figures show the loop working, not a model's quality._"]

    test = evo.get("test") or {}
    if test:
        (s0, p0), (s1, p1) = _score_of(test.get("start")), _score_of(test.get("frozen"))
        ks = sorted(set(p0) | set(p1), key=int)
        out += ["", f"### Held-out test split ({test.get('trials', '?')} trial(s) per task)", "",
                "| harness | score | " + " | ".join(f"pass^{k}" for k in ks) + " |",
                "|---|---:|" + "---:|" * len(ks)]
        out.append("| before (start) | " + _fmt(s0) + " | " + " | ".join(_fmt(p0.get(k)) for k in ks) + " |")
        out.append("| after (frozen) | " + _fmt(s1) + " | " + " | ".join(_fmt(p1.get(k)) for k in ks) + " |")
        if s0 is not None and s1 is not None:
            out += ["", f"change on test: {s1 - s0:+.3f}"]
        for name, entry in (test.get("transfer") or {}).items():
            (t0, _), (t1, _) = _score_of((entry or {}).get("start")), _score_of((entry or {}).get("frozen"))
            out.append(f"- transfer to `{name}`: {_fmt(t0)} -> {_fmt(t1)}")

    out += ["", "### Rounds (train split)", ""]
    if evo.get("accept"):
        from .acceptance import accept_text

        out += [f"Acceptance: {accept_text(evo['accept'])}. Effect: mean per-task reward difference "
                "(candidate - incumbent) with its bootstrap interval over tasks; p: one-sided p-value of "
                "\"no improvement\".", ""]
    out += ["| round | strategy | score before | score after | outcome | effect [interval] | p | "
            "editor calls | tokens | wall s |", "|---:|---|---:|---:|---|---|---:|---:|---:|---:|"]
    for r in rounds:
        out.append(f"| {r.get('round')} | {r.get('strategy')} | {_fmt(r.get('score_before'))} | "
                   f"{_fmt(r.get('score_after'))} | {r.get('outcome')} | {_effect(r.get('decision'))} | "
                   f"{_p(r.get('decision'))} | {r.get('editor_calls', 0)} | "
                   f"{(r.get('tokens') or {}).get('total', 0)} | {r.get('wall_s', 0):.1f} |")

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
    from .metrics import cost_usd, load_prices

    diag_model = summary.get("diagnosis_model") or model
    cost, note = cost_usd(diag_model, tokens, load_prices()) if diag_model else (None, "unknown model")
    cost_text = "0 (simulated model)" if note == "simulated" else ("unknown" if cost is None else f"${cost:.4f}")
    out += ["", "### Cost", "",
            f"diagnosis and editing tokens {tokens['total']} (prompt {tokens['prompt']}, completion "
            f"{tokens['completion']}) · estimated cost {cost_text} · evolution wall-clock "
            f"{evo.get('wall_s', 0):.1f} s"]
    if summary.get("cost_usd") is not None or summary.get("cost_note"):
        out.append(f"task runs of the starting harness: tokens {(summary.get('tokens') or {}).get('total', 0)} · "
                   f"cost {_cost(summary)}")
    out += ["", "_Generated by pytest-ecdysis. Review the diff like any other change; the score is noisy "
            "(reruns of an unchanged harness move by several points)._"]
    return safetext.markdown("\n".join(out) + "\n")
