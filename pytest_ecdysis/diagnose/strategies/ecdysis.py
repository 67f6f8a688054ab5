"""`ecdysis`: Failure-Driven Collaborative Refinement (FDCR) over cross-task pattern groups.

Analyst, Critic and Engineer share one transcript for K passes (`cfg.fdcr_passes`, default 2), reading
the ranked pattern groups with example records, the harness map, earlier rounds and the solved tasks;
then the Moderator writes one modification spec. 3K+1 calls (one more if the spec needed a repair).
"""

from __future__ import annotations

import time

from pytest_ecdysis.diagnose.fdcr import evidence_for, finish, run_fdcr
from pytest_ecdysis.diagnose.strategies.base import RoundInput
from pytest_ecdysis.diagnose.transcript import Diagnosis, Transcript
from pytest_ecdysis.endpoint.role_client import RoleClient


class Ecdysis:
    name = "ecdysis"
    instance_level = False

    def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis:
        start = time.monotonic()
        evidence = evidence_for(round_input)
        tx = Transcript(round_input.round_dir)
        passes = int(getattr(round_input.cfg, "fdcr_passes", 2) or 2)
        spec, reason, detail = run_fdcr(evidence, client, passes, tx, round_input.harness_dir)
        return finish(spec, reason, detail, tx, round_input.round_dir, start, evidence)


STRATEGY = Ecdysis()
