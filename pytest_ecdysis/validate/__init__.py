"""Scoring a candidate from a trusted copy: validation sub-runs, the sandbox, the integrity ledger, the static check."""
