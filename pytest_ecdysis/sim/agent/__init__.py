"""The simulated agent policy: one `trial.AgentTrial` per trial follows the task's plan, perturbed by the
quirks of a model profile, and reads every value it sends from the request (docs/simulated-model.md).

The trial is composed of parts that share one `state.AgentState`: `trial` (the plan and the request),
`draws` (quirk draws, ground truth), `rules` (the prompt's rules it follows, the values it is told; parsed
by `instructions`), `intent` (the arguments it means), `emit` (the messages it sends), `user_steps` (asking
the user for a dual-control step). This package must not import tau2.
"""
