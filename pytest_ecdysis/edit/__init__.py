"""Editors (builtin, cmd:, sim) turning a modification spec into a harness edit; the edit prompt."""
