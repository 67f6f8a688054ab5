"""The data of a run's HTML page: every file of a run directory read tolerantly into plain data.

`gather(run_path) -> dict` is what `report.html` renders: the summary, the failure groups with each
record's trajectory (messages cut at `MAX_MESSAGE_CHARS`, at most `MAX_RECORDS_PER_GROUP` records a group),
for an evolution the rounds (outcome, spec, diffs highlighted by Pygments, flips), the chart's points and
the test split, and `missing`: each file or field it could not use (a missing, unreadable, half-written or
older-schema run directory never raises). No tau2 or network imports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from pytest_ecdysis.core import safetext
from pytest_ecdysis.core.records import SCHEMA_VERSION
from pytest_ecdysis.report import summary as report
from pytest_ecdysis.report.evolution import OUTCOME_TEXT

#: A message's content is cut to this many characters on the page (with a marker saying how much).
MAX_MESSAGE_CHARS = 4000
#: At most this many failure records are shown per group (the rest are counted).
MAX_RECORDS_PER_GROUP = 8


class _Reader:
    """Reads a run directory's files, noting each one it could not use instead of raising."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.missing: list[str] = []

    def json(self, rel: str, *, needed: bool = True) -> Any:
        path = self.root / rel
        if not path.is_file():
            if needed:
                self.missing.append(f"{rel} is missing")
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.missing.append(f"{rel} cannot be read ({exc.__class__.__name__}: {exc}); written halfway?")
            return None

    def jsonl(self, rel: str, *, needed: bool = True) -> list[dict[str, Any]]:
        path = self.root / rel
        if not path.is_file():
            if needed:
                self.missing.append(f"{rel} is missing")
            return []
        rows, bad = [], 0
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            self.missing.append(f"{rel} cannot be read ({exc})")
            return []
        for line in lines:
            try:
                row = json.loads(line) if line.strip() else None
            except ValueError:
                row = None
                bad += 1
            if isinstance(row, dict):
                rows.append(row)
        if bad:
            self.missing.append(
                f"{rel}: {bad} line(s) are not JSON (cut off by an interruption?) and were skipped"
            )
        return rows

    def text(self, rel: str) -> str | None:
        path = self.root / rel
        try:
            return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
        except OSError:
            return None

    def schema(self, rel: str, doc: Any) -> None:
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and version != SCHEMA_VERSION:
            self.missing.append(
                f"{rel} has schema version {version!r}, this version of pytest-ecdysis writes "
                f"{SCHEMA_VERSION}: fields it lacks are shown as '–'"
            )


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def highlight_diff(text: str) -> Markup:
    """A unified diff as highlighted HTML (Pygments, CSS classes defined once in the page)."""
    return Markup(highlight(safetext.terminal(text), DiffLexer(), HtmlFormatter(cssclass="diff")))


def _message_view(trial: dict[str, Any]) -> list[dict[str, Any]]:
    """A trial's conversation as the model saw it: a tool message shows the `model_view` the harness sent
    (observed on the wire; paired through the call id of the assistant message at the record's `step`)
    when recorded, else τ²'s result; `edited` marks a result the harness changed; `by_user` the user's own
    tool calls and their results (dual control, τ² telecom). Long contents are cut."""
    messages = [m for m in _list(trial.get("messages")) if isinstance(m, dict)]
    by_step: dict[Any, list[Any]] = {}
    for c in _list(trial.get("tool_calls")):
        if isinstance(c, dict):
            by_step.setdefault(c.get("step"), []).append(c.get("model_view"))
    seen: dict[Any, Any] = {}
    for i, m in enumerate(messages):
        calls = [c for c in _list(m.get("tool_calls")) if isinstance(c, dict)]
        for call, view in zip(calls, by_step.get(i, []), strict=False):
            if view is not None:
                seen[call.get("id")] = view
    out = []
    for m in messages:
        role, content, edited = str(m.get("role", "?")), m.get("content"), False
        if role == "tool" and m.get("id") in seen:
            edited = seen[m.get("id")] != content
            content = seen[m.get("id")]
        content = "" if content is None else content if isinstance(content, str) else json.dumps(content)
        if len(content) > MAX_MESSAGE_CHARS:
            content = content[:MAX_MESSAGE_CHARS] + f" … [cut {len(content) - MAX_MESSAGE_CHARS} chars]"
        shown_calls = [
            f"{_dict(c.get('function', c)).get('name', '?')}"
            f"({json.dumps(_dict(c.get('function', c)).get('arguments', ''), ensure_ascii=False)})"
            for c in _list(m.get("tool_calls"))
            if isinstance(c, dict)
        ]
        by_user = m.get("requestor") == "user"  # dual control: the user's own tool call or its result
        out.append(
            {"role": role, "content": content, "calls": shown_calls, "edited": edited, "by_user": by_user}
        )
    return out


def _groups(r: _Reader, summary: dict[str, Any]) -> list[dict[str, Any]]:
    groups = _list(_dict(r.json("groups.json", needed=bool(summary))).get("groups"))
    trials = {
        f"{t.get('suite')}/{t.get('task_id')}/t{t.get('trial')}": t
        for t in r.jsonl("trials.jsonl", needed=bool(summary))
    }
    records = {
        f"{f.get('suite')}/{f.get('task_id')}/t{f.get('trial')}": f
        for f in r.jsonl("failures.jsonl", needed=False)
    }
    out = []
    for g in groups:
        if not isinstance(g, dict):
            continue
        keys = [str(k) for k in _list(g.get("records"))]
        shown = []
        for key in keys[:MAX_RECORDS_PER_GROUP]:
            rec, trial = _dict(records.get(key)), _dict(trials.get(key))
            shown.append(
                {
                    "key": key,
                    "reward": rec.get("reward", trial.get("reward")),
                    "termination_reason": rec.get("termination_reason", trial.get("termination_reason")),
                    "first_tool_error": rec.get("first_tool_error"),
                    "checks": trial.get("checks") or trial.get("evaluator_checks"),
                    "messages": _message_view(trial),
                }
            )
        out.append({**g, "records": keys, "shown": shown, "hidden": max(0, len(keys) - len(shown))})
    return out


def _chart(start: float | None, rounds: list[dict[str, Any]], test: dict[str, Any]) -> dict[str, Any] | None:
    """Coordinates of the score-per-round chart (SVG units, 640 x 260): the incumbent's train score as a
    step line, each candidate as a dot coloured by outcome, and the test split's start and frozen scores."""
    if start is None:
        return None
    w, h, left, top, bottom = 640, 260, 48, 16, 40
    n = len(rounds)
    has_test = test.get("start") is not None or test.get("frozen") is not None
    slots = n + 1 + (1 if has_test else 0)
    xs = [left + (w - left - 20) * (i + 0.5) / slots for i in range(slots)]
    scores = [start] + [_num(r.get("score_after")) for r in rounds] + [test.get("start"), test.get("frozen")]
    hi = max([s for s in scores if s is not None] + [0.0])
    top_value = 1.0 if hi <= 1.0 else hi

    def y(v: float) -> float:
        return round(top + (h - top - bottom) * (1 - v / top_value), 1)

    line, best = [(xs[0], y(start))], start
    dots = [{"x": xs[0], "y": y(start), "outcome": "start", "label": f"{start:.3f}"}]
    for i, r in enumerate(rounds, start=1):
        after = _num(r.get("score_after"))
        if after is not None:
            dots.append({"x": xs[i], "y": y(after), "outcome": r.get("outcome"), "label": f"{after:.3f}"})
        if r.get("accepted") and after is not None:
            best = after
        line.append((xs[i], y(best)))
    ticks = [{"y": y(v * top_value), "label": f"{v * top_value:.2f}"} for v in (0, 0.25, 0.5, 0.75, 1.0)]
    labels = [{"x": xs[0], "text": "start"}] + [{"x": xs[i], "text": f"round {i}"} for i in range(1, n + 1)]
    tests = []
    if has_test:
        labels.append({"x": xs[-1], "text": "test split"})
        for which, dx in (("start", -18), ("frozen", 18)):
            v = _num(test.get(which))
            if v is not None:
                tests.append({"x": xs[-1] + dx, "y": y(v), "which": which, "label": f"{v:.3f}"})
    return {
        "w": w,
        "h": h,
        "left": left,
        "bottom": h - bottom,
        "ticks": ticks,
        "labels": labels,
        "dots": dots,
        "tests": tests,
        "line": " ".join(f"{x:.1f},{yy:.1f}" for x, yy in line),
    }


def _round_files(r: _Reader, row: dict[str, Any]) -> dict[str, Any]:
    n = row.get("round")
    rdir = f"rounds/{n}"
    diff = r.text(f"{rdir}/candidate.diff")
    steps = []
    for st in _list(row.get("steps")):
        if isinstance(st, dict):
            sdir = f"{rdir}/steps/{st.get('step')}"
            sdiff = r.text(f"{sdir}/candidate.diff")
            steps.append(
                {
                    **st,
                    "spec": _dict(r.json(f"{sdir}/spec.json", needed=False)),
                    "diff": highlight_diff(sdiff) if sdiff else None,
                }
            )
    return {
        **row,
        "outcome_text": OUTCOME_TEXT.get(str(row.get("outcome")), str(row.get("outcome", "?"))),
        "spec": _dict(r.json(f"{rdir}/spec.json", needed=False)),
        "steps": steps,
        "diff": highlight_diff(diff) if diff else None,
        "flips": _dict(row.get("flips")),
    }


def _cost_table(evo: Any) -> dict[str, Any] | None:
    """The evolution's cost by role (`report/cost.py`), None for a run without one."""
    from pytest_ecdysis.report.cost import cost_rows

    return cost_rows(evo) if isinstance(evo, dict) else None


def gather(run_path: Path | str) -> dict[str, Any]:
    """Everything the page shows, as plain data; `missing` lists what could not be read (never raises)."""
    root = Path(run_path)
    r = _Reader(root)
    if not root.is_dir():
        r.missing.append(
            f"{root} is not a directory: nothing to show (pass a run directory, .ecdysis/runs/<run-id>)"
        )
        return {"run_id": root.name, "summary": {}, "evolution": None, "groups": [], "missing": r.missing}
    evo = r.json("evolution.json", needed=False)
    summary = r.json("summary.json", needed=True)
    if summary is None and evo is None and not any(root.iterdir()):
        r.missing = [f"{root} is empty: the run wrote nothing (stopped before its first trial finished?)"]
    r.schema("summary.json", summary)
    summary = _dict(summary)
    view: dict[str, Any] = {
        "run_id": summary.get("run_id") or root.name,
        "summary": summary,
        "groups": _groups(r, summary),
        "evolution": None,
        "simulated": False,
    }
    view["simulated"] = str(summary.get("model") or _dict(evo).get("model") or "").startswith("sim")
    gate = _dict(summary.get("gate"))
    view["gate"] = gate or None
    if isinstance(evo, dict):
        r.schema("evolution.json", evo)
        rounds = [_round_files(r, row) for row in _list(evo.get("rounds")) if isinstance(row, dict)]
        test = _dict(evo.get("test"))
        scores = {
            w: _num(test.get(w))
            if _num(test.get(w)) is not None
            else _num(_dict(test.get(w)).get("suite_score"))
            for w in ("start", "frozen")
        }  # older runs kept a bare number
        start = _num(_dict(evo.get("start")).get("score"))
        if evo.get("status") != "finished":
            r.missing.append(
                f"evolution.json: status {evo.get('status')!r}, not 'finished': the run was interrupted "
                f"or is still running ({len(rounds)} round(s) done); resume it with "
                f"--ecdysis-resume {view['run_id']}"
            )
        elif test.get("skipped"):
            r.missing.append(f"test split not scored: {test['skipped']}")
        elif not test.get("start") or not test.get("frozen"):
            r.missing.append("evolution.json: no test-split scores (start and frozen)")
        view["evolution"] = {
            **evo,
            "rounds": rounds,
            "test_scores": scores,
            "decided_by": _decided_by(evo),
            "transfer": _dict(test.get("transfer")),
            "test": test,
            "chart": _chart(start, rounds, scores),
        }
    view["cost"] = report._cost(summary) if summary else "–"
    view["cost_table"] = _cost_table(evo)
    weak = summary.get("weak_passes")
    view["weak_passes"] = weak if isinstance(weak, (list, dict, int)) and weak else None  # may be absent
    view["missing"] = r.missing
    return view


def _decided_by(evo: dict[str, Any]) -> str:
    """The rule that decided the rounds, its measured error rates (with their source) and the trials the
    confirmation spent (`report.verdict.decided_by`); '' for a run without recorded settings."""
    from pytest_ecdysis.report.verdict import decided_by

    return "; ".join(text for text, _ in decided_by(evo))
