"""Comparing two runs: the acceptance rules' statistics and the regression gate against a baseline."""
