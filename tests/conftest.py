"""Shared test setup: pytester available, no network, tau2 imports quiet and offline."""

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The simulated model's noisy draws depend on a run nonce (docs/simulated-model.md): fixed in tests, so
# every run, sub-run and rerun is byte-identical.
os.environ["ECDYSIS_SIM_NONCE"] = "tests"

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _own_run_and_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test inherits this session's run id or simulated server: the plugin exports both (for its
    workers), so every pytest a test started reused them: two runs of one test (with
    and without an option, say) sent the same trial headers to the same server, the second continuing the
    first's conversations, and ran on that server's nonce and latency instead of their own options
    (issue 18's identity test). A test that needs a server starts its own. (Not popped when this file is
    imported: xdist workers of a suite run from the repository root import it too, and lost the
    controller's server before their configure read it.)"""
    monkeypatch.delenv("ECDYSIS_RUN_ID", raising=False)
    monkeypatch.delenv("ECDYSIS_SIM_URL", raising=False)
    monkeypatch.delenv("ECDYSIS_SESSION_PID", raising=False)


# numpy's and scipy's C extensions cannot be loaded twice in one process, and pytester's in-process runs
# drop the modules they imported from sys.modules afterwards: import them here, before any such run, so
# the paired acceptance test (acceptance.py) works in every in-process run.
import scipy.stats  # noqa: E402, F401
