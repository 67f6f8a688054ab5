"""git for the loop: a scrubbed environment, the runner, candidate worktrees and snapshots, the result branch."""
