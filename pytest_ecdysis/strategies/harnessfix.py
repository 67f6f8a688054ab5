"""`harnessfix` (a simple variant): one analyst call over all failures *without* pattern grouping.

Every failure record is shown as its own single-record entry (no signatures shared across tasks, so no
cross-task ranking), with the harness map and history; the analyst writes one spec directly (1 call).
It stands for "fix the harness from the failure logs" approaches that aggregate by reading, not by
grouping. It is not a reimplementation of any published system.
"""

from __future__ import annotations

import time

from ..diagnose import Diagnosis, Transcript, evidence_for, finish, run_single_analyst
from ..evidence import record_key
from ..llm import RoleClient
from ..records import PatternGroup
from .base import RoundInput


class HarnessFix:
    name = "harnessfix"
    instance_level = False

    def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis:
        start = time.monotonic()
        flat = [PatternGroup(signature=f"record:{record_key(r)}", cross_task=False, tasks=[r.task_id],
                             records=[record_key(r)], termination_reason=r.termination_reason,
                             failed_components=list(r.failed_components))
                for r in round_input.records]
        ungrouped = RoundInput(**{**round_input.__dict__, "groups": flat})
        evidence = evidence_for(ungrouped)
        tx = Transcript(round_input.round_dir)
        spec, reason, detail = run_single_analyst(evidence, client, tx, round_input.harness_dir)
        return finish(spec, reason, detail, tx, round_input.round_dir, start, evidence)


STRATEGY = HarnessFix()
