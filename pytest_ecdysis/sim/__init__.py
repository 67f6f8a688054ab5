"""The simulated model: a deterministic OpenAI-compatible endpoint with model quirks and a ground truth.

- `server`: the HTTP server (`start_background`, `python -m pytest_ecdysis.sim`) and request routing;
- `agent` / `user`: the agent and user policies for trials of a suite;
- `profiles`: model profiles (quirk kinds, rates, seed, per-task difficulty) from `profiles/*.json`;
- `knowledge`: the protocol a suite implements to tell the model its tasks (`SimKnowledge`, `SimTask`);
- `client`: fetch a trial's ground truth and append it to `<run>/sim/ground_truth.jsonl`;
- `roles` (diagnosis part) and `editor` (evolution part): answers for FDCR roles and the sim editor.

See docs/simulated-model.md. Nothing here imports tau2, the task suites or a harness.
"""

from pytest_ecdysis.sim.knowledge import Dependency, IdBend, PlanStep, Scenario, SimKnowledge, SimTask

__all__ = ["Dependency", "IdBend", "PlanStep", "Scenario", "SimKnowledge", "SimTask"]
