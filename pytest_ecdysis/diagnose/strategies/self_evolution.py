"""`self-evolution`: instance-level refinement, the paper's Self-Evolution baseline.

One analyst call per failure record (after the failure-aware selection, if any), each seeing only that
record (as a single-task group), the harness map and the history, and writing one spec; no cross-task
aggregation and no review. The specs come back in `Diagnosis.specs`, in record order, to be patched one
by one (`instance_level = True`); `spec.json` holds the first, `specs.json` all of them. Calls and tokens
grow with the number of failures, which is the cost the paper measures (8,120.6 s vs 4,403.0 s training).
"""

from __future__ import annotations

import json
import time

from pytest_ecdysis.core.records import SCHEMA_VERSION, PatternGroup
from pytest_ecdysis.diagnose.fdcr import evidence_for, run_single_analyst
from pytest_ecdysis.diagnose.spec import write_spec
from pytest_ecdysis.diagnose.strategies.base import RoundInput
from pytest_ecdysis.diagnose.transcript import Diagnosis, Transcript
from pytest_ecdysis.endpoint.role_client import RoleClient
from pytest_ecdysis.evidence.views import record_key, select_records, usable_records


class SelfEvolution:
    name = "self-evolution"
    instance_level = True

    def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis:
        start = time.monotonic()
        tx = Transcript(round_input.round_dir)
        records = select_records(
            usable_records(round_input.records), getattr(round_input.cfg, "evidence_limit", None)
        )
        specs, problems, chars = [], [], 0
        for record in records:
            single = PatternGroup(
                signature=f"instance:{record_key(record)}",
                cross_task=False,
                tasks=[record.task_id],
                records=[record_key(record)],
                termination_reason=record.termination_reason,
                failed_components=list(record.failed_components),
            )
            one = RoundInput(**{**round_input.__dict__, "records": [record], "groups": [single]})
            evidence = evidence_for(one)
            chars = max(chars, len(evidence.render()))
            spec, reason, detail = run_single_analyst(evidence, client, tx, round_input.harness_dir)
            if spec is not None and spec.changes:
                specs.append(spec)
            elif reason:
                problems.append(f"{record_key(record)}: {detail}")
        if specs:
            write_spec(round_input.round_dir, specs[0])
            if round_input.round_dir is not None:
                (round_input.round_dir / "specs.json").write_text(
                    json.dumps(
                        {
                            "schema_version": SCHEMA_VERSION,
                            "specs": [s.model_dump(mode="json") for s in specs],
                        },
                        indent=2,
                        ensure_ascii=False,
                    )
                    + "\n",
                    encoding="utf-8",
                )
        reason = "" if specs else ("invalid_spec" if problems else "no_spec")
        detail = "; ".join(problems[:5]) if not specs else f"{len(specs)} instance-level spec(s)"
        return Diagnosis(
            spec=specs[0] if specs else None,
            reason=reason,
            detail=detail,
            transcript=tx.lines,
            tokens=tx.tokens,
            wall_s=time.monotonic() - start,
            calls=len(tx.lines),
            specs=specs,
            instance_level=True,
            n_records=len(records),
            evidence_chars=chars,
        )


STRATEGY = SelfEvolution()
