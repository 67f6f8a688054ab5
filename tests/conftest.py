"""Shared test setup: pytester available, no network, tau2 imports quiet and offline."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.pop("ECDYSIS_SIM_URL", None)
os.environ.pop("ECDYSIS_RUN_ID", None)

pytest_plugins = ["pytester"]
