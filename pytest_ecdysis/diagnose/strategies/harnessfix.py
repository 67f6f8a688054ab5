"""`harnessfix`, as described for HarnessFix: harness-aware traces, attributed failures, flaw records,
scoped repair operators, regression-aware acceptance.

1. Each usable failed trial becomes a harness-aware trace (`harness_traces.trace`): steps with data and
   control links, each aligned with the harness artifact that shaped it (tool wrapper, feedback rule,
   budget, context trimming, prompt section, closing check), located in the incumbent's source.
2. Each failure is attributed to its responsible step and artifact (`attribute`); recurring attributions
   are consolidated into flaw records (`consolidate`), most tasks first.
3. Each flaw (the first `MAX_FLAWS`) is mapped to a scoped repair operator (`operator_for`: change a budget,
   add a guard, add a check, rewrite a tool description, with the files it may touch); one analyst call per
   flaw sees only that flaw's records, the flaw record and the operator, and writes the repair; changes
   outside the operator's scope are dropped (recorded).
4. The scoped repairs make one candidate (one editor call), accepted only by regression-aware validation
   (`evolve.alternatives`, `acceptance.decide_no_regression`): a candidate that raises the score but breaks
   a task the incumbent solved is rejected.

Written to `rounds/<n>/`: `traces.jsonl` (one trace a line), `flaws.json` (attributions and flaw records),
`operators.json` (the operator per flaw, the changes kept and dropped), `transcript.jsonl`, `spec.json`.
"""

from __future__ import annotations

import json
import time

from pytest_ecdysis.core.records import SCHEMA_VERSION, ModificationSpec, PatternGroup, SpecChange
from pytest_ecdysis.diagnose.fdcr import evidence_for, load_prompt, role_messages
from pytest_ecdysis.diagnose.spec import spec_call, write_spec
from pytest_ecdysis.diagnose.strategies.base import RoundInput
from pytest_ecdysis.diagnose.strategies.harness_traces import (
    attribute,
    consolidate,
    in_scope,
    locate,
    operator_for,
    trace,
)
from pytest_ecdysis.diagnose.transcript import Diagnosis, Transcript
from pytest_ecdysis.endpoint.role_client import RoleClient
from pytest_ecdysis.evidence.views import record_key, select_records, usable_records

#: Flaws repaired per round (the most recurring ones); each costs one analyst call.
MAX_FLAWS = 3


class HarnessFix:
    name = "harnessfix"
    instance_level = False
    alternatives = True

    def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis:
        start = time.monotonic()
        tx = Transcript(round_input.round_dir)
        records = select_records(
            usable_records(round_input.records), getattr(round_input.cfg, "evidence_limit", None)
        )
        by_key = {record_key(r): r for r in records}
        artifacts = locate(round_input.harness_dir)
        traces = [trace(r, artifacts) for r in records]
        causes = [attribute(t) for t in traces]
        flaws = consolidate(causes)
        prompt = load_prompt("analyst_nofdcr")
        operators, changes, seen, chars, problems = [], [], set(), 0, []
        for flaw in flaws[:MAX_FLAWS]:
            op = operator_for(flaw, artifacts)
            recs = [by_key[k] for k in flaw["records"]]
            group = PatternGroup(
                signature=f"flaw:{flaw['flaw_id']}:{flaw['flaw']}",
                cross_task=len(flaw["tasks"]) > 1,
                tasks=flaw["tasks"],
                records=flaw["records"],
                termination_reason=recs[0].termination_reason,
                failed_components=sorted({c for r in recs for c in r.failed_components}),
            )
            text = evidence_for(
                RoundInput(**{**round_input.__dict__, "records": recs, "groups": [group]})
            ).render()
            chars = max(chars, len(text))
            text += (
                "\n\nHarnessFix repair: the flaw record and the repair operator below. Write only the repair "
                "this operator allows, touching only the files in `may_touch` (or adding the artifact when "
                "`creates` is true).\n"
                + json.dumps(
                    {
                        "flaw": {k: flaw[k] for k in ("flaw_id", "flaw", "artifact", "tasks", "records")},
                        "operator": op,
                    },
                    ensure_ascii=False,
                )
            )
            spec, reason, detail = spec_call(
                client,
                "analyst",
                role_messages("analyst", prompt, 1, 1, text, [], "spec"),
                tx,
                1,
                round_input.harness_dir,
            )
            kept: list[SpecChange] = []
            dropped: list[SpecChange] = []
            for change in spec.changes if spec is not None else []:
                (kept if in_scope(change.files, op) else dropped).append(change)
            for change in kept:
                key = json.dumps([change.component, sorted(change.files), change.parameters], sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    changes.append(change)
            if spec is None:
                problems.append(f"{flaw['flaw_id']}: {detail}")
            operators.append(
                {
                    **op,
                    "flaw": flaw["flaw"],
                    "call": len(tx.lines),
                    "outcome": reason or "repaired",
                    "kept": [c.description for c in kept],
                    "dropped_out_of_scope": [
                        {"files": c.files, "description": c.description} for c in dropped
                    ],
                }
            )
        self._write(round_input, traces, causes, flaws, operators)
        spec = None
        if changes:
            names = ", ".join(
                f"{o['operator']} on {o['flaw_id']} ({o['flaw']})" for o in operators if o["kept"]
            )
            spec = ModificationSpec(
                summary=f"HarnessFix: {names}",
                changes=changes,
                watch_tasks=sorted(map(str, round_input.solved_tasks))[:20],
            )
            write_spec(round_input.round_dir, spec)
        detail = (
            f"{len(flaws)} flaw record(s) from {len(traces)} trace(s); {len(changes)} scoped change(s)"
            if spec
            else "; ".join(problems[:5]) or f"{len(flaws)} flaw record(s), no repair in scope"
        )
        return Diagnosis(
            spec=spec,
            reason="" if spec else ("invalid_spec" if problems else "no_spec"),
            detail=detail,
            transcript=tx.lines,
            tokens=tx.tokens,
            wall_s=time.monotonic() - start,
            calls=len(tx.lines),
            specs=[spec] if spec else [],
            alternatives=True,
            regression_aware=True,
            n_records=len(records),
            evidence_chars=chars,
        )

    @staticmethod
    def _write(round_input: RoundInput, traces: list, causes: list, flaws: list, operators: list) -> None:
        rdir = round_input.round_dir
        if rdir is None:
            return
        rdir.mkdir(parents=True, exist_ok=True)
        (rdir / "traces.jsonl").write_text(
            "".join(json.dumps(t, ensure_ascii=False, default=str) + "\n" for t in traces), encoding="utf-8"
        )
        for name, doc in (
            ("flaws.json", {"attributions": causes, "flaws": flaws}),
            ("operators.json", {"operators": operators}),
        ):
            (rdir / name).write_text(
                json.dumps(
                    {"schema_version": SCHEMA_VERSION, **doc}, indent=2, ensure_ascii=False, default=str
                )
                + "\n",
                encoding="utf-8",
            )


STRATEGY = HarnessFix()
