"""Shared test setup: pytester available, no network, tau2 imports quiet and offline."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.pop("ECDYSIS_SIM_URL", None)
os.environ.pop("ECDYSIS_RUN_ID", None)
# The simulated model's noisy draws depend on a run nonce (docs/simulated-model.md): fixed in tests, so
# every run, sub-run and rerun is byte-identical.
os.environ["ECDYSIS_SIM_NONCE"] = "tests"

pytest_plugins = ["pytester"]

# numpy's and scipy's C extensions cannot be loaded twice in one process, and pytester's in-process runs
# drop the modules they imported from sys.modules afterwards: import them here, before any such run, so
# the paired acceptance test (acceptance.py) works in every in-process run.
import scipy.stats  # noqa: E402, F401
