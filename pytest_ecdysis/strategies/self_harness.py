"""`self-harness` (a simple variant): the agent reflects on its own trajectories, blind to the harness.

One analyst call writes the spec from the ranked pattern groups and their example records only: no map
of the harness source and no history of earlier rounds (so rejected ideas can come back). It stands for
approaches where the model revises its own scaffold from its traces; the role model is still
`--ecdysis-diagnosis-model`. It is not a reimplementation of any published system.
"""

from __future__ import annotations

import time

from ..diagnose import Diagnosis, Transcript, evidence_for, finish, run_single_analyst
from ..llm import RoleClient
from .base import RoundInput


class SelfHarness:
    name = "self-harness"
    instance_level = False

    def propose(self, round_input: RoundInput, client: RoleClient) -> Diagnosis:
        start = time.monotonic()
        evidence = evidence_for(round_input, include_harness=False, include_history=False)
        tx = Transcript(round_input.round_dir)
        spec, reason, detail = run_single_analyst(evidence, client, tx, round_input.harness_dir)
        return finish(spec, reason, detail, tx, round_input.round_dir, start, evidence)


STRATEGY = SelfHarness()
