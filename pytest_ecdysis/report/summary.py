"""Renderings of a run: the `ecdysis` terminal section and Markdown summaries; a run directory's reads.

Everything here reads plain data (summary dicts, groups, run directories) and returns text; no pytest
imports. Used by `session` at the end of a run, by the `ecdysis` CLI and by the gate
workflow (job summary). `junit.xml` is written by `junit`, the PR body of an evolution by `pr_body`.

Text from outside (error messages, tool results, signatures, node ids) goes through `safetext` for the
format it lands in: terminal lines and Markdown carry no control characters.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pytest_ecdysis.core import safetext
from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.core.secrets import redact

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


def _user_tokens(summary: dict[str, Any], sep: str) -> str:
    """The user simulator's tokens (counted in the cost), shown only when it spent any."""
    total = (summary.get("user_tokens") or {}).get("total", 0)
    return f"{sep}user simulator tokens {total}" if total else ""


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


def summary_lines(
    summary: dict[str, Any],
    groups: list[dict[str, Any]],
    gate: dict[str, Any] | None = None,
    problems: list[str] | None = None,
    *,
    weak_hint: str | None = WEAK_PASSES_HINT,
) -> list[str]:
    """The plain-text summary the terminal section and `ecdysis show` print (control characters escaped).

    `weak_hint`: where the weak passes are listed (None: no pointer; `ecdysis show` says "listed below")."""
    ks = _ks(summary)
    head = f"{'suite':<28}{'tasks':>6}{'trials':>7}{'score':>7}" + "".join(f"{'pass^' + k:>8}" for k in ks)
    head += f"{'solved':>7}{'infra':>6}"
    lines = [
        f"run {summary.get('run_id')}  split {summary.get('split')}  model {summary.get('model')}  "
        f"harness {summary.get('harness_id') or 'none'}",
        head,
    ]
    for label, s in score_rows(summary):
        row = f"{label:<28}{s.get('n_tasks', 0):>6}{s.get('n_trials', 0):>7}{_fmt(s.get('suite_score')):>7}"
        row += "".join(f"{_fmt((s.get('pass_hat_k') or {}).get(k)):>8}" for k in ks)
        row += f"{s.get('n_solved', 0):>7}{s.get('n_infra_errors', 0):>6}"
        lines.append(row)
    tok = summary.get("tokens") or {}
    lines.append(
        f"failures {summary.get('n_failures', 0)}  tokens {tok.get('total', 0)} "
        f"(prompt {tok.get('prompt', 0)}, completion {tok.get('completion', 0)}){_user_tokens(summary, '  ')}  "
        f"cost {_cost(summary)}  wall {summary.get('wall_s', 0):.1f} s"
    )
    if summary.get("limits"):
        lines.append(limits_line(summary["limits"]))
    if summary.get("kept_out"):
        lines.append(
            "failures kept out of the evidence: "
            + ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in summary["kept_out"].items())
        )
    if summary.get("n_weak_passes"):
        lines.append(
            f"weak passes: {summary['n_weak_passes']} (a communicate value under 3 characters, no tool "
            "call, a write without the user's confirmation, or a gold action not matched"
            f"{'; ' + weak_hint if weak_hint else ''})"
        )
    if summary.get("suspect_tasks"):
        lines.append(f"suspect tasks (scored, kept out of evidence): {', '.join(summary['suspect_tasks'])}")
        for task, why in (summary.get("suspect_reasons") or {}).items():
            lines.append(f"  {task}: {why}")
    if summary.get("user_aborts"):
        lines.append(
            f"user simulator aborts (###OUT-OF-SCOPE###; scored as τ² does, kept out of evidence): "
            f"{', '.join(summary['user_aborts'])}"
        )
    if summary.get("endpoint_refusal"):
        lines.append(f"ENDPOINT: {summary['endpoint_refusal']}")
    if groups:
        lines.append(f"top failure groups ({len(groups)} in all, cross-task first):")
        for g in groups[:TOP_GROUPS]:
            tag = "cross-task" if g.get("cross_task") else "single    "
            lines.append(f"  {tag} {len(g['records']):>3} rec {len(g['tasks']):>3} tasks  {g['signature']}")
    if summary.get("stopped"):
        names = summary.get("not_run") or []
        lines.append(
            f"stopped early ({summary['stopped']}): {len(names)} case(s) not run"
            + (
                f": {', '.join(names[:10])}" + (f" and {len(names) - 10} more" if len(names) > 10 else "")
                if names
                else ""
            )
        )
    for p in problems or []:
        lines.append(f"PROBLEM: {p}")
    if gate:
        lines.append(gate["headline"])
        lines.extend(
            f"  - {r}"
            for r in gate.get("reasons", [])
            if not gate.get("passed") and r not in gate["headline"]
        )  # a refusal's headline has them
    return [safetext.terminal(line) for line in lines]


def limits_line(limits: dict[str, Any]) -> str:
    """`limits: call 60 s, retries 3, trial 900 s, diagnosis 1800 s, editor 900 s` (`summary.json` `limits`)."""
    return (
        f"limits: call {limits.get('call_timeout_s'):g} s, retries {limits.get('max_retries')}, "
        f"trial {limits.get('trial_budget_s'):g} s, diagnosis {limits.get('diagnosis_budget_s'):g} s, "
        f"editor {limits.get('editor_budget_s'):g} s"
    )


def summary_markdown(
    summary: dict[str, Any],
    groups: list[dict[str, Any]],
    gate: dict[str, Any] | None = None,
    problems: list[str] | None = None,
) -> str:
    """The Markdown summary (GitHub job summary): score table, top groups, problems, gate verdict (control
    characters escaped)."""
    ks = _ks(summary)
    out = [f"## pytest-ecdysis run `{summary.get('run_id')}`", ""]
    if gate:
        out += [f"**{gate['headline']}**", ""]
        if not gate.get("passed") and gate.get("reasons"):
            out += [f"- {r}" for r in gate["reasons"] if r not in gate["headline"]] + [""]
    out.append(
        f"split `{summary.get('split')}` · model `{summary.get('model')}` · harness "
        f"`{summary.get('harness_id') or 'none'}` · λ {summary.get('threshold')}"
    )
    if str(summary.get("model", "")).startswith("sim"):
        out.append("\n_Simulated model (no real LLM): figures show the pipeline, not a model's quality._")
    out += [
        "",
        "| suite | tasks | trials | score | " + " | ".join(f"pass^{k}" for k in ks) + " | solved | infra |",
        "|---|---:|---:|---:|" + "---:|" * len(ks) + "---:|---:|",
    ]
    for label, s in score_rows(summary):
        out.append(
            f"| {label} | {s.get('n_tasks', 0)} | {s.get('n_trials', 0)} | {_fmt(s.get('suite_score'))} | "
            + " | ".join(_fmt((s.get("pass_hat_k") or {}).get(k)) for k in ks)
            + f" | {s.get('n_solved', 0)} | {s.get('n_infra_errors', 0)} |"
        )
    tok = summary.get("tokens") or {}
    out += [
        "",
        f"failures {summary.get('n_failures', 0)} · tokens {tok.get('total', 0)}{_user_tokens(summary, ' · ')}"
        f" · cost {_cost(summary)} · "
        f"wall {summary.get('wall_s', 0):.1f} s",
    ]
    if summary.get("suspect_tasks"):
        out += [
            "",
            "suspect tasks (scored, kept out of evidence): "
            + ", ".join(f"`{t}`" for t in summary["suspect_tasks"]),
        ]
        out += [f"- `{task}`: {_cell(why)}" for task, why in (summary.get("suspect_reasons") or {}).items()]
    if summary.get("user_aborts"):
        out += [
            "",
            "user simulator aborts (`###OUT-OF-SCOPE###`, kept out of evidence): "
            + ", ".join(f"`{t}`" for t in summary["user_aborts"]),
        ]
    if summary.get("endpoint_refusal"):
        out += ["", f"> **Endpoint:** {summary['endpoint_refusal']}"]
    if groups:
        out += ["", "| failure group | cross-task | records | tasks |", "|---|---|---:|---:|"]
        out += [
            f"| `{_cell(g['signature'])}` | {'yes' if g.get('cross_task') else 'no'} | {len(g['records'])} | "
            f"{len(g['tasks'])} |"
            for g in groups[:TOP_GROUPS]
        ]
    if summary.get("stopped"):
        out += [
            "",
            f"**Stopped early** ({summary['stopped']}): {len(summary.get('not_run') or [])} case(s) not run.",
        ]
    if problems:
        out += [""] + [f"> **Problem:** {' '.join(str(p).splitlines())}" for p in problems]
    return safetext.markdown("\n".join(out) + "\n")


def append_step_summary(markdown: str) -> Path | None:
    """Append to `$GITHUB_STEP_SUMMARY` when set; returns its path (None when unset)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(redact(markdown) + "\n")
    return Path(target)


# --------------------------------------------------------------------------- run directories


def read_json(path: Path) -> Any:
    """Read a run-directory JSON file. Raises RunDirError naming the file."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunDirError(
            f"{path} does not exist: is {path.parent} a pytest-ecdysis run directory?"
        ) from None
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
    return {
        "solved_to_failed": [k for k in common if a[k]["solved"] and not b[k]["solved"]],
        "failed_to_solved": [k for k in common if not a[k]["solved"] and b[k]["solved"]],
        "only_before": sorted(set(a) - set(b)),
        "only_after": sorted(set(b) - set(a)),
    }
