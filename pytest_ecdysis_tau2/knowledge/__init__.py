"""What the simulated model knows of τ² tasks (the `ecdysis_sim_knowledge` providers, `providers`):
airline and retail (`sim_knowledge`), telecom's dual-control plan (`telecom_knowledge`)."""
