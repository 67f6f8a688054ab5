"""One τ² trial in the worker's trusted process: τ²'s orchestrator between the harness's agent and the user
simulator (`runner`), the user (`user`), telecom's user-side tools (`dual_control`), the model client and
its transports (`endpoint`), the worker's trial threads (`trial_pool`) and the tasks whose gold actions
fail (`suspect`). Harness code never runs here; it is reached through `harness_process`."""
