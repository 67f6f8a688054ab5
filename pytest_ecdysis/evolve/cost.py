"""What an evolution spent, per role: tokens and, where a price is known, USD, read from its run directory.

A cost block (`rounds[i].cost`, and the top-level `cost` of `evolution.json`) has the shape::

    {"roles": {"<role>": {"prompt": int, "completion": int, "total": int, "calls": int, "usd": float | None}},
     "stages": {"<stage>": int},           # tokens of the trials by stage (below)
     "tokens": int, "usd": float | None,    # None when a part with tokens has an unknown price
     "unknown": ["<note>"]}                 # why a price is unknown, each model once

Roles: `agent` and `user` (the user simulator) of every trial; the diagnosis roles of `transcript.jsonl`
lines (`analyst`, `critic`, `engineer`, `moderator`, or a strategy's own role names; `calls` = lines);
`diagnosis` for a strategy that writes no transcript (`diagnosis.json` tokens); `editor` (`edit.json` tokens,
`calls` its editor calls). Trials by stage, from where the sub-run's
`summary.json` lies: `start` (the session's own run), `validation` (the candidate), `rescore` (the incumbent
re-run beside it), `confirmation` (ini `ecdysis_accept_extra_trials`), `ablation`, `test` (the test split).
Prices: `core.prices` (agent with the sub-run's `model`, user with its `user_model`, roles and editor with
`--ecdysis-diagnosis-model`). Responses served from the response cache are counted as their trials report
them (the tokens of the call that was cached).

Pure reading of files and sums; no model call. Only the controller runs this.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.prices import Prices, cost_usd
from pytest_ecdysis.core.records import RoundRecord
from pytest_ecdysis.evolve.context import RoundContext

#: the order roles are listed in (others follow, sorted).
ROLE_ORDER = ("agent", "user", "analyst", "critic", "engineer", "moderator", "editor")
#: trial stages, in the order they are listed.
STAGE_ORDER = ("start", "validation", "rescore", "confirmation", "heldout", "ablation", "test")


class CostBook:
    """Sums tokens per role (and trial tokens per stage), priced per model as they are added."""

    def __init__(self, prices: Prices) -> None:
        self.prices = prices
        self.roles: dict[str, dict[str, Any]] = {}
        self.stages: dict[str, int] = {}
        self.unknown: list[str] = []

    def add(
        self,
        role: str,
        model: str | None,
        tokens: dict[str, Any] | None,
        calls: int = 0,
        stage: str | None = None,
    ) -> None:
        """Add `tokens` (`{"prompt", "completion", "total"}`) spent by `role` on `model`."""
        tokens = tokens or {}
        prompt, completion = int(tokens.get("prompt", 0) or 0), int(tokens.get("completion", 0) or 0)
        total = int(tokens.get("total", 0) or 0) or prompt + completion
        slot = self.roles.setdefault(role, {"prompt": 0, "completion": 0, "total": 0, "calls": 0, "usd": 0.0})
        slot["prompt"] += prompt
        slot["completion"] += completion
        slot["total"] += total
        slot["calls"] += int(calls)
        if stage is not None:
            self.stages[stage] = self.stages.get(stage, 0) + total
        if not total:
            return
        usd, note = cost_usd(model or "unknown", {"prompt": prompt, "completion": completion}, self.prices)
        if usd is None:
            slot["usd"] = None
            if note not in self.unknown:
                self.unknown.append(note)
        elif slot["usd"] is not None:
            slot["usd"] += usd

    def add_block(self, block: dict[str, Any] | None) -> None:
        """Add another cost block (a round's) as it is: its USD were priced already."""
        for role, slot in ((block or {}).get("roles") or {}).items():
            mine = self.roles.setdefault(
                role, {"prompt": 0, "completion": 0, "total": 0, "calls": 0, "usd": 0.0}
            )
            for key in ("prompt", "completion", "total", "calls"):
                mine[key] += int(slot.get(key, 0) or 0)
            mine["usd"] = (
                None if mine["usd"] is None or slot.get("usd") is None else mine["usd"] + slot["usd"]
            )
        for stage, n in ((block or {}).get("stages") or {}).items():
            self.stages[stage] = self.stages.get(stage, 0) + int(n)
        for note in (block or {}).get("unknown") or []:
            if note not in self.unknown:
                self.unknown.append(note)

    def block(self) -> dict[str, Any]:
        roles = {
            r: self.roles[r]
            for r in [*ROLE_ORDER, *sorted(set(self.roles) - set(ROLE_ORDER))]
            if r in self.roles
        }
        for slot in roles.values():
            if slot["usd"] is not None:
                slot["usd"] = round(slot["usd"], 6)
        usd_parts = [s["usd"] for s in roles.values() if s["total"]]
        return {
            "roles": roles,
            "stages": {
                s: self.stages[s]
                for s in [*STAGE_ORDER, *sorted(set(self.stages) - set(STAGE_ORDER))]
                if s in self.stages
            },
            "tokens": sum(s["total"] for s in roles.values()),
            "usd": None if any(u is None for u in usd_parts) else round(sum(usd_parts), 6),
            "unknown": list(self.unknown),
        }


def add_trials(book: CostBook, summary: dict[str, Any], stage: str) -> None:
    """The agent's and the user simulator's tokens of one run's `summary.json` (a dict)."""
    book.add("agent", summary.get("model"), summary.get("tokens"), stage=stage)
    book.add(
        "user", summary.get("user_model") or summary.get("model"), summary.get("user_tokens"), stage=stage
    )


def trial_stage(rel: Path) -> str:
    """The stage of a sub-run from its `summary.json` path relative to the round (or run) directory."""
    parts = set(rel.parts[:-1])
    if "test" in parts:
        return "test"
    if "heldout" in parts:  # the held-out check's runs, candidate's and incumbent's (`evolve.heldout`)
        return "heldout"
    if "ablation" in parts:
        return "ablation"
    if "extra" in parts:
        return "confirmation"
    if "incumbent" in parts:
        return "rescore"
    return "validation"


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def directory_cost(book: CostBook, directory: Path, diagnosis_model: str, root: Path | None = None) -> None:
    """Add every diagnosis role line, editor call and sub-run under `directory` (a round, or `test/`)."""
    root = root or directory
    for path in sorted(directory.rglob("transcript.jsonl")):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                turn = json.loads(line)
            except ValueError:
                continue
            book.add(str(turn.get("role") or "role"), diagnosis_model, turn.get("tokens"), calls=1)
    for path in sorted(directory.rglob("diagnosis.json")):  # a strategy that keeps no transcript
        if not (path.parent / "transcript.jsonl").is_file():
            book.add("diagnosis", diagnosis_model, (_read(path) or {}).get("tokens"))
    for path in sorted(directory.rglob("edit.json")):
        edit = _read(path) or {}
        book.add("editor", diagnosis_model, edit.get("tokens"), calls=int(edit.get("calls", 1) or 0))
    for path in sorted(directory.rglob("summary.json")):
        summary = _read(path)
        if isinstance(summary, dict) and "tokens" in summary:
            add_trials(book, summary, trial_stage(path.relative_to(root)))


def round_cost(run_dir: Path, n: int, diagnosis_model: str, prices: Prices) -> dict[str, Any]:
    """The cost block of round `n` (everything under `rounds/<n>/`)."""
    book = CostBook(prices)
    directory_cost(book, run_dir / "rounds" / str(n), diagnosis_model)
    return book.block()


def evolution_cost(
    doc: Mapping[str, Any], run_dir: Path, diagnosis_model: str, prices: Prices
) -> dict[str, Any]:
    """The top-level cost block: the starting run of each session (`doc["cost_start_runs"]`: a resumed run
    scored its start harness again), every round's block (`rounds[i].cost`, else read from its directory)
    and the test split; with the parts `start` and `test` as blocks of their own."""
    start, test, total = CostBook(prices), CostBook(prices), CostBook(prices)
    for summary in doc.get("cost_start_runs") or []:
        add_trials(start, summary, "start")
    if (run_dir / "test").is_dir():
        directory_cost(test, run_dir / "test", diagnosis_model, root=run_dir)
    start_block, test_block = start.block(), test.block()
    total.add_block(start_block)
    for r in doc.get("rounds") or []:
        total.add_block(r.get("cost") or round_cost(run_dir, r["round"], diagnosis_model, prices))
    total.add_block(test_block)
    return {**total.block(), "start": start_block, "test": test_block}


def start_run_entry(summary: dict[str, Any]) -> dict[str, Any]:
    """What a session's starting run adds to `cost_start_runs`: its models and tokens."""
    return {
        "model": summary.get("model"),
        "user_model": summary.get("user_model"),
        "tokens": dict(summary.get("tokens") or {}),
        "user_tokens": dict(summary.get("user_tokens") or {}),
        "n_trials": summary.get("n_trials"),
    }


def _prices(ev: RoundContext) -> Prices:
    from pytest_ecdysis.core.prices import load_prices

    return load_prices(getattr(ev.cfg, "rootdir", None))


def note_start_run(ev: RoundContext) -> None:
    """Record this session's starting run in `cost_start_runs` (each session scores the start harness: a
    resumed run paid for it again)."""
    ev.doc.setdefault("cost_start_runs", []).append(start_run_entry(ev.summary))


def refresh(ev: RoundContext, row: RoundRecord | None = None) -> None:
    """Set `row["cost"]` (a round that just finished, unless it has one) and the top-level `cost` of
    `ev.doc` from the run directory."""
    prices = _prices(ev)
    model = getattr(ev.cfg, "diagnosis_model", None) or ev.doc.get("model") or "unknown"
    if row is not None and not row.get("cost"):
        row["cost"] = round_cost(ev.dir, row["round"], model, prices)
    ev.doc["cost"] = evolution_cost(ev.doc, ev.dir, model, prices)
