"""Shared vocabulary every stage uses: errors, records, options and configuration, the harness's identity, run-directory JSON, scores."""
