"""The simulated user: `trial.UserTrial` answers the agent as the task's user scenario says; `tools` reads
which of its own tools (dual control, τ² telecom) the agent's words ask for. This package must not import
tau2.
"""
