"""Cost per role of an evolution, formatted: the terminal table, the PR body's Markdown and the HTML page's rows.

Pure formatting of the cost blocks of `evolution.json` (`rounds[i].cost`, the top-level `cost`; their shape is
in `evolve/cost.py` and docs/report.md). Tokens are shown as `98.2k`; USD as `$0.0123`, `$0` for a price of
0, `sim` when every part was the simulated model, `?` when a price is unknown (never 0). No file or model work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the columns of the role table and their headings.
COLUMNS = (
    ("agent", "agent"),
    ("user", "user sim"),
    ("analyst", "analyst"),
    ("critic", "critic"),
    ("engineer", "engineer"),
    ("moderator", "moderator"),
    ("editor", "editor"),
)
STAGE_TEXT = {
    "start": "starting run",
    "validation": "validation",
    "rescore": "incumbent re-runs",
    "confirmation": "confirmation trials",
    "heldout": "held-out checks",
    "ablation": "ablation",
    "test": "test split",
}


def tokens_text(n: int | None) -> str:
    """`812`, `98.2k`, `1.23M`; '-' for 0 or None."""
    if not n:
        return "-"
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1e6:.2f}M"


def usd_text(usd: float | None, simulated: bool = False) -> str:
    """`$0.0123` (4 significant digits under $1), `$12.34`; `sim` for the simulated model, `?` when unknown."""
    if usd is None:
        return "?"
    if simulated and usd == 0:
        return "sim"
    if usd == 0:
        return "$0"
    return f"${usd:.4g}" if usd < 1 else f"${usd:,.2f}"


def _roles(block: dict[str, Any]) -> dict[str, dict[str, Any]]:
    roles = block.get("roles")
    return {k: v for k, v in roles.items() if isinstance(v, dict)} if isinstance(roles, dict) else {}


def _columns(blocks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The fixed role columns, then any other role (a strategy's own) that spent tokens."""
    others = sorted(
        {r for b in blocks for r, s in _roles(b).items() if s.get("total") and r not in dict(COLUMNS)}
    )
    return [*COLUMNS, *((r, r) for r in others)]


def cost_rows(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The role table as data (a resumed run's row `start x2`: each session scored the start harness): `{"columns": [heading], "rows": [{"label", "cells": [tokens text], "tokens",
    "usd"}], "stages": [(text, tokens text)], "unknown": [note]}`; None without cost blocks."""
    total = doc.get("cost") if isinstance(doc.get("cost"), dict) else None
    rounds = [r for r in doc.get("rounds") or [] if isinstance(r, dict) and isinstance(r.get("cost"), dict)]
    if not total and not rounds:
        return None
    simulated = str(doc.get("model") or "").startswith("sim")
    starts = len(doc.get("cost_start_runs") or []) if isinstance(doc.get("cost_start_runs"), list) else 0
    labelled = (
        (
            [("start run" if starts <= 1 else f"start x{starts}", total.get("start"))]
            if total and isinstance(total.get("start"), dict)
            else []
        )
        + [(f"round {r['round']}", r["cost"]) for r in rounds]
        + (
            [("test split", total.get("test"))]
            if total and isinstance(total.get("test"), dict) and total["test"].get("tokens")
            else []
        )
        + ([("total", total)] if total else [])
    )
    columns = _columns([b for _, b in labelled])
    rows = []
    for label, block in labelled:
        roles = _roles(block)
        rows.append(
            {
                "label": label,
                "cells": [tokens_text((roles.get(key) or {}).get("total")) for key, _ in columns],
                "tokens": tokens_text(block.get("tokens")),
                "usd": usd_text(block.get("usd"), simulated),
            }
        )
    stage_block = (total or {}).get("stages")
    stages = [
        (STAGE_TEXT.get(s, s), tokens_text(n))
        for s, n in (stage_block.items() if isinstance(stage_block, dict) else [])
        if isinstance(n, int) and n
    ]
    return {
        "columns": [h for _, h in columns],
        "rows": rows,
        "stages": stages,
        "unknown": list((total or {}).get("unknown") or []),
    }


def cost_lines(doc: Mapping[str, Any]) -> list[str]:
    """The terminal table: one line per part (start run, each round, test split, total), tokens per role,
    all tokens and USD; then the trial tokens by stage and each unknown price, said once."""
    data = cost_rows(doc)
    if data is None:
        return []
    widths = [max(7, len(h)) for h in data["columns"]]
    out = [
        "cost by role (tokens; USD where a price is known: litellm's price map or .ecdysis/prices.json)",
        f"{'':<11}"
        + "  ".join(f"{h:>{w}}" for h, w in zip(data["columns"], widths, strict=True))
        + f"  {'tokens':>8}  {'USD':>9}",
    ]
    for row in data["rows"]:
        out.append(
            f"{row['label']:<11}"
            + "  ".join(f"{c:>{w}}" for c, w in zip(row["cells"], widths, strict=True))
            + f"  {row['tokens']:>8}  {row['usd']:>9}"
        )
    if data["stages"]:
        out.append(
            "trial tokens (agent + user) by stage: " + ", ".join(f"{s} {n}" for s, n in data["stages"])
        )
    out += [f"cost unknown: {note}" for note in data["unknown"]]
    return out


def cost_markdown(doc: dict[str, Any]) -> list[str]:
    """The PR body's cost table (Markdown), empty without cost blocks."""
    data = cost_rows(doc)
    if data is None:
        return []
    out = [
        "| part | " + " | ".join(data["columns"]) + " | tokens | USD |",
        "|---|" + "---:|" * (len(data["columns"]) + 2),
    ]
    for row in data["rows"]:
        bold = "**" if row["label"] == "total" else ""
        out.append(
            f"| {bold}{row['label']}{bold} | "
            + " | ".join(row["cells"])
            + f" | {row['tokens']} | {row['usd']} |"
        )
    if data["stages"]:
        out += [
            "",
            "Trial tokens (agent + user simulator) by stage: "
            + ", ".join(f"{s} {n}" for s, n in data["stages"])
            + ".",
        ]
    out += [f"- cost unknown: {note}" for note in data["unknown"]]
    return out
