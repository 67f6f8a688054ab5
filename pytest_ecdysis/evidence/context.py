"""What the roles see besides the failures: the harness map and the earlier rounds.

`harness_map(dir)` outlines the harness's files (docstring, top-level functions and classes, UPPER_CASE
settings), parsed with `ast` and never imported; `history_view(rounds)` lists earlier rounds' specs and
outcomes (`PastRound`). Both are parts of `evidence.build.build_evidence`'s data. This module must not import
tau2 or suites.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pytest_ecdysis.core.harness import harness_files
from pytest_ecdysis.core.records import ModificationSpec
from pytest_ecdysis.evidence.views import cut

MAX_HISTORY = 10
#: the latest rounds whose candidate diff the roles see (each cut to `MAX_DIFF_CHARS`), and the most tasks a
#: flip list shows: the lineage stays a few thousand characters of the evidence's `DEFAULT_MAX_CHARS`.
MAX_HISTORY_DIFFS = 3
MAX_DIFF_CHARS = 1_500
MAX_FLIPS_LISTED = 10
MAX_HARNESS_FILES = 40


class PastRound(BaseModel):
    """An earlier round as the roles see it: its spec and what became of it."""

    round: int
    outcome: str
    score_before: float | None = None
    score_after: float | None = None
    spec: ModificationSpec | None = None
    #: the candidate's diff (`rounds/<n>/candidate.diff`), None when no candidate was made
    diff: str | None = None
    #: `{"failed_to_solved": [task], "solved_to_failed": [task]}` of the validated candidate
    flips: dict[str, list[str]] | None = None
    #: the decision's figures (`rule`, `method`, `effect`, `p_value`, `wins`, `losses`), when one was made
    decision: dict[str, Any] | None = None


def harness_map(harness_dir: Path) -> dict[str, Any]:
    """Files of the harness with their docstring, top-level functions/classes and UPPER_CASE settings.

    Parsed with `ast` (never imported); a file that does not parse is listed with `parse_error`.
    """
    files: list[dict[str, Any]] = []
    rels = harness_files(harness_dir)
    for rel in rels[:MAX_HARNESS_FILES]:
        path = harness_dir / rel
        entry: dict[str, Any] = {"path": rel.as_posix(), "bytes": path.stat().st_size}
        if rel.suffix == ".py":
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
                entry["parse_error"] = str(exc)[:200]
            else:
                doc = ast.get_docstring(tree)
                if doc:
                    entry["doc"] = cut(doc.strip().splitlines()[0], 200)
                entry.update(_module_outline(tree))
        files.append(entry)
    out: dict[str, Any] = {"files": files}
    if len(rels) > MAX_HARNESS_FILES:
        out["files_omitted"] = len(rels) - MAX_HARNESS_FILES
    return out


def _module_outline(tree: ast.Module) -> dict[str, Any]:
    functions: list[str] = []
    settings: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            sig = f"{node.name}({ast.unparse(node.args)})"
            functions.append(cut(sig + (f": {doc.strip().splitlines()[0]}" if doc else ""), 200))
        elif isinstance(node, ast.ClassDef):
            methods = [n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            functions.append(cut(f"class {node.name}: " + ", ".join(methods), 200))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper() and node.value is not None:
                    try:
                        value = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    if isinstance(value, int | float | bool) or (isinstance(value, str) and len(value) <= 80):
                        settings[target.id] = value
    out: dict[str, Any] = {}
    if functions:
        out["functions"] = functions[:20]
    if settings:
        out["settings"] = dict(list(settings.items())[:20])
    return out


def _past_round(item: Any) -> PastRound:
    if isinstance(item, PastRound):
        return item
    if isinstance(item, Mapping):
        return PastRound.model_validate(item)
    return PastRound.model_validate(
        {
            k: getattr(item, k, None)
            for k in ("round", "outcome", "score_before", "score_after", "spec", "diff", "flips", "decision")
        }
    )


def history_view(history: Iterable[Any]) -> list[dict[str, Any]]:
    """Earlier rounds, newest last: outcome, score change and each change's knob, parameters and files."""
    out = []
    pasts = [_past_round(h) for h in history][-MAX_HISTORY:]
    for i, past in enumerate(pasts):
        delta = None
        if past.score_before is not None and past.score_after is not None:
            delta = round(past.score_after - past.score_before, 4)
        entry: dict[str, Any] = {
            "round": past.round,
            "outcome": past.outcome,
            "accepted": past.outcome == "accepted",
            "score_before": past.score_before,
            "score_after": past.score_after,
            "score_change": delta,
        }
        if past.spec is not None:
            entry["summary"] = cut(past.spec.summary, 300)
            entry["changes"] = [
                {
                    "component": c.component,
                    "files": c.files,
                    "description": cut(c.description, 200),
                    "parameters": c.parameters,
                }
                for c in past.spec.changes[:10]
            ]
        _lineage(entry, past, recent=i >= len(pasts) - MAX_HISTORY_DIFFS)
        out.append(entry)
    return out


def _lineage(entry: dict[str, Any], past: PastRound, *, recent: bool) -> None:
    """Add what became of a round's spec: the decision, the per-task flips and (for the latest rounds) the diff."""
    if past.decision:
        entry["decision"] = {
            k: past.decision[k]
            for k in ("rule", "method", "effect", "p_value", "wins", "losses")
            if past.decision.get(k) is not None
        }
    if past.flips and any(past.flips.values()):
        entry["flips"] = {
            k: list(v[:MAX_FLIPS_LISTED])
            + ([f"... {len(v) - MAX_FLIPS_LISTED} more"] if len(v) > MAX_FLIPS_LISTED else [])
            for k, v in past.flips.items()
            if isinstance(v, list)
        }
    if past.diff:
        entry["diff"] = (
            cut(past.diff, MAX_DIFF_CHARS) if recent else f"({len(past.diff)} characters, not shown)"
        )
