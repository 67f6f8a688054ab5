"""τ²-bench airline (`tau2-airline`): one case per task x trial, e.g. `test_airline[3-t0]`."""

from .cases import check_trial, generate_trials, tau2_trial  # noqa: F401, F811 - tau2_trial is the fixture

DOMAIN = "airline"


def pytest_generate_tests(metafunc):
    generate_trials(metafunc, DOMAIN)


def test_airline(tau2_trial, ecdysis):  # noqa: F811
    check_trial(tau2_trial, ecdysis.cfg.threshold)
