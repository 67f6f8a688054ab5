"""`self-harness`, as described for Self-Harness: weaknesses mined from traces, several diverse minimal
modifications per round, each validated against the suite with regression tests, the best that passes kept.

1. Mine weaknesses: each pattern group of the round is a weakness (cross-task groups and larger groups
   first); when there are fewer than the proposals asked for (ini `ecdysis_proposals`, default `PROPOSALS`), the records of the largest groups become weaknesses of
   their own, so a round still gets several proposals.
2. Propose: one analyst call per weakness (at most ini `ecdysis_proposals`), each seeing only that weakness's records,
   the harness map, the history and the changes already proposed this round (asked for a different one),
   and asked for the single smallest change; a spec is cut to one change (minimal): its first change not
   proposed earlier this round (diverse), and a spec whose every change was proposed already (same
   component, files and parameters) is dropped as a duplicate.
3. Validate and choose (`evolve.alternatives`): every distinct proposal is one editor call and one
   validation sub-run from the same incumbent; regression-aware (a proposal that breaks a task the
   incumbent solved does not pass); the best that passes becomes the incumbent.

Calls: one analyst call per weakness (two with a repair), one editor call per distinct proposal.
Written to `rounds/<n>/`: `weaknesses.json`, `proposals.json` (each proposal: weakness, spec summary,
duplicate or number), `transcript.jsonl`, `spec.json` (the first proposal); each proposal's validation in
`rounds/<n>/proposals/<k>/decision.json`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pytest_ecdysis.core.records import SCHEMA_VERSION, FailureRecord, ModificationSpec, PatternGroup
from pytest_ecdysis.diagnose.fdcr import evidence_for, load_prompt, role_messages
from pytest_ecdysis.diagnose.spec import spec_call, write_spec
from pytest_ecdysis.diagnose.strategies.base import RoundInput
from pytest_ecdysis.diagnose.transcript import Diagnosis, Transcript
from pytest_ecdysis.endpoint.role_client import RoleClient
from pytest_ecdysis.evidence.views import record_key, usable_records

#: The default of ini `ecdysis_proposals`, proposals per round (the Self-Harness description asks for several:
#: at least three; a smaller value is allowed and runs a reduced Self-Harness).
PROPOSALS = 3


def mine_weaknesses(
    records: list[FailureRecord], groups: list[PatternGroup], limit: int = PROPOSALS
) -> list[tuple[PatternGroup, list[FailureRecord]]]:
    """Weaknesses `(group, its records)`: the groups, cross-task and larger first, then single records of the
    largest groups (as single-record groups) until `limit`; at most `limit`, each with at least one record."""
    by_key = {record_key(r): r for r in usable_records(records)}
    ranked = sorted(groups, key=lambda g: (not g.cross_task, -len(g.records), g.signature))
    out = [(g, [by_key[k] for k in g.records if k in by_key]) for g in ranked]
    out = [(g, recs) for g, recs in out if recs]
    for g, recs in list(out):
        for r in recs[1:] if len(recs) > 1 else []:
            if len(out) >= limit:
                break
            single = PatternGroup(
                signature=f"{g.signature}#{record_key(r)}",
                cross_task=False,
                tasks=[r.task_id],
                records=[record_key(r)],
                termination_reason=r.termination_reason,
                failed_components=list(r.failed_components),
                tool=g.tool,
                error_class=g.error_class,
            )
            out.append((single, [r]))
    return out[:limit]


def change_key(spec: ModificationSpec) -> str:
    """What makes two minimal proposals the same: component, files and parameters of their change."""
    return json.dumps([[c.component, sorted(c.files), c.parameters] for c in spec.changes], sort_keys=True)


class SelfHarness:
    name = "self-harness"
    instance_level = False
    alternatives = True

    def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis:
        start = time.monotonic()
        tx = Transcript(round_input.round_dir)
        weaknesses = mine_weaknesses(
            round_input.records, round_input.groups, getattr(round_input.cfg, "proposals", PROPOSALS)
        )
        prompt = load_prompt("analyst_nofdcr")
        specs: list[ModificationSpec] = []
        rows: list[dict[str, Any]] = []
        problems: list[str] = []
        chars = 0
        seen: dict[str, int] = {}  # change key -> index in `specs` of the first proposal with it
        for i, (group, recs) in enumerate(weaknesses, start=1):
            evidence = evidence_for(
                RoundInput(**{**round_input.__dict__, "records": recs, "groups": [group]})
            )
            text = evidence.render()
            chars = max(chars, len(text))
            ask = (
                f"\n\nSelf-Harness proposal {i} of {len(weaknesses)}: the weakness is the group "
                f"{group.signature}. Propose the single smallest harness change that addresses it (one entry "
                "in `changes`)."
            )
            if specs:
                ask += " Already proposed this round (propose a different one): " + "; ".join(
                    s.summary.strip() for s in specs
                )
            messages = role_messages("analyst", prompt, 1, 1, text + ask, [], "spec")
            spec, reason, detail = spec_call(client, "analyst", messages, tx, 1, round_input.harness_dir)
            row = {
                "weakness": group.signature,
                "records": [record_key(r) for r in recs],
                "call": len(tx.lines),
            }
            if spec is None or not spec.changes:
                row.update(outcome=reason or "no_spec", detail=detail or "the spec proposes no change")
                problems.append(f"{group.signature}: {row['detail']}")
            else:
                # minimal: one change, the first this round has not proposed yet (diverse)
                singles = [spec.model_copy(update={"changes": [c]}) for c in spec.changes]
                spec = next((x for x in singles if change_key(x) not in seen), singles[0])
                trimmed = len(singles) - 1
                key = change_key(spec)
                if key in seen:
                    row.update(outcome="duplicate", duplicate_of=seen[key], summary=spec.summary)
                else:
                    specs.append(spec)
                    seen[key] = len(specs)
                    row.update(
                        outcome="proposed",
                        proposal=len(specs),
                        summary=spec.summary,
                        changes_dropped_for_minimality=trimmed,
                    )
            rows.append(row)
        if round_input.round_dir is not None:
            round_input.round_dir.mkdir(parents=True, exist_ok=True)
            (round_input.round_dir / "weaknesses.json").write_text(
                json.dumps(
                    {
                        "schema_version": SCHEMA_VERSION,
                        "weaknesses": [
                            {
                                "signature": g.signature,
                                "cross_task": g.cross_task,
                                "tasks": g.tasks,
                                "records": [record_key(r) for r in recs],
                            }
                            for g, recs in weaknesses
                        ],
                    },
                    indent=2,
                    ensure_ascii=False,
                )
                + "\n",
                encoding="utf-8",
            )
            (round_input.round_dir / "proposals.json").write_text(
                json.dumps(
                    {"schema_version": SCHEMA_VERSION, "proposals": rows}, indent=2, ensure_ascii=False
                )
                + "\n",
                encoding="utf-8",
            )
        if specs:
            write_spec(round_input.round_dir, specs[0])
        return Diagnosis(
            spec=specs[0] if specs else None,
            reason=""
            if specs
            else (
                "invalid_spec"
                if any(r["outcome"] in ("invalid_spec", "outside_harness") for r in rows)
                else "no_spec"
            ),
            detail=_detail(specs, weaknesses, rows, problems),
            transcript=tx.lines,
            tokens=tx.tokens,
            wall_s=time.monotonic() - start,
            calls=len(tx.lines),
            specs=specs,
            alternatives=True,
            regression_aware=True,
            n_records=sum(len(r) for _, r in weaknesses),
            evidence_chars=chars,
        )


def _detail(
    specs: list[ModificationSpec], weaknesses: list[Any], rows: list[dict[str, Any]], problems: list[str]
) -> str:
    """Why the round has the proposals it has: how many weaknesses gave a distinct one, and what the others
    gave (a duplicate of an earlier proposal, no usable spec)."""
    if not specs:
        return "; ".join(problems[:5]) or "no weakness to propose for"
    out = f"{len(specs)} distinct proposal(s) from {len(weaknesses)} weakness(es)"
    dup = sum(r["outcome"] == "duplicate" for r in rows)
    if dup:
        out += f"; {dup} answer(s) repeated an earlier proposal"
    if problems:
        out += f"; {len(problems)} without a usable spec ({'; '.join(problems[:2])})"
    return out


STRATEGY = SelfHarness()
