"""The simulated model: a deterministic OpenAI-compatible endpoint with model quirks and a ground truth.

At the top, the endpoint and the vocabulary its rooms share:

- `server`: the HTTP server (`start_background`, `make_server`; `python -m pytest_ecdysis.sim`, `__main__`);
- `model`: `SimModel`, one completion routed by role and trial, the trial state, the ground truth;
- `client`: fetch a trial's ground truth and append it to `<run>/sim/ground_truth.jsonl`;
- `knowledge`: the protocol a suite implements to tell the model its tasks (`SimKnowledge`, `SimTask`);
- `profiles`: model profiles (quirk kinds, rates, seed, per-task difficulty) from `profiles/*.json`;
- `reading`, `values`: what a request shows the model, and argument values at a path.

The rooms: `agent/` (the agent policy, `agent.trial.AgentTrial`), `user/` (the user policy), `roles/` (the
FDCR roles' answers), `editor/` (the sim editor's recipes and edit operations) and `truth/` (causes, the
harness's repairs, replay, the validity of accepted edits). See docs/simulated-model.md.

The simulated model stays inside the core package, as a layer of its own in the import contracts (below
the editors and diagnosis, above the evidence): `sim` is the default model, which the plugin starts itself
(`run.controller`), and `python -m pytest_ecdysis.sim` and the `knowledge` protocol that suites implement
are addresses users rely on. What it knows of τ² stays outside it, registered by the τ² suite through the
`ecdysis_sim_knowledge` hook: nothing here imports tau2, the task suites or a harness.
"""
