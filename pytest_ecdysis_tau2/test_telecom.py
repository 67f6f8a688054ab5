"""τ²-bench telecom (`tau2-telecom`): one case per task x trial, e.g. `test_telecom[<task id>-t0]`.

Dual control: the user simulator holds τ²'s user tools (the phone: airplane mode, data roaming, APN settings,
speed tests) and calls them itself when the agent asks; τ² scores by environment assertions on both sides.
"""

from .cases import check_trial, generate_trials, tau2_trial  # noqa: F401, F811 - tau2_trial is the fixture

DOMAIN = "telecom"


def pytest_generate_tests(metafunc):
    generate_trials(metafunc, DOMAIN)


def test_telecom(tau2_trial, ecdysis):  # noqa: F811
    check_trial(tau2_trial, ecdysis.cfg.threshold)
