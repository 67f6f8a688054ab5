"""The round loop: diagnose -> one edit -> validate -> accept, ablation, the test split, state and resume."""
