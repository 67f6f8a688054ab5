"""A pytest session of the τ² suites as a benchmark starts it in a child process: its environment and the
head of its command, shared by the benchmarks that run whole sessions (acceptance, sim validity, the
engineer's edits, the calibration, the strategies).

Imported by those scripts from their own folder (`python benchmarks/<name>.py` puts it on `sys.path`).
"""

from __future__ import annotations

import os
import sys

#: What a session exports for its own workers (server, run id, nonce): a benchmark started from inside a
#: session, or under pytest, must not hand them to its child, which would reuse that server's conversations
#: and draws instead of its own options'.
OWN_SESSION = ("ECDYSIS_SIM_URL", "ECDYSIS_RUN_ID", "ECDYSIS_SIM_NONCE")


def session_env(**extra: str) -> dict[str, str]:
    """This process's environment without `OWN_SESSION`, with LiteLLM's bundled price map (no fetch of it
    at import) and `extra` (`PYTHONPATH=...`, say)."""
    env = {k: v for k, v in os.environ.items() if k not in OWN_SESSION}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.update(extra)
    return env


def pytest_command(*suites: str) -> list[str]:
    """`python -m pytest <suites> -q -p no:cacheprovider`, this interpreter's; the options follow."""
    return [sys.executable, "-m", "pytest", *suites, "-q", "-p", "no:cacheprovider"]
