"""`ecdysis-nofdcr`: the same evidence as `ecdysis` (ranked groups, harness map, history), but a single
analyst call writes the modification spec directly, with no Critic and no Engineer (1 call; the
ablation "Ecdysis without FDCR" of the paper).
"""

from __future__ import annotations

import time

from pytest_ecdysis.diagnose.fdcr import evidence_for, finish, run_single_analyst
from pytest_ecdysis.diagnose.strategies.base import RoundInput
from pytest_ecdysis.diagnose.transcript import Diagnosis, Transcript
from pytest_ecdysis.endpoint.role_client import RoleClient


class EcdysisNoFDCR:
    name = "ecdysis-nofdcr"
    instance_level = False

    def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis:
        start = time.monotonic()
        evidence = evidence_for(round_input)
        tx = Transcript(round_input.round_dir)
        spec, reason, detail = run_single_analyst(evidence, client, tx, round_input.harness_dir)
        return finish(spec, reason, detail, tx, round_input.round_dir, start, evidence)


STRATEGY = EcdysisNoFDCR()
