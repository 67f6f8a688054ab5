"""τ²-bench retail (`tau2-retail`): one case per task x trial, e.g. `test_retail[3-t0]`."""

from .cases import check_trial, generate_trials, tau2_trial  # noqa: F401, F811 - tau2_trial is the fixture

DOMAIN = "retail"


def pytest_generate_tests(metafunc):
    generate_trials(metafunc, DOMAIN)


def test_retail(tau2_trial, ecdysis):  # noqa: F811
    check_trial(tau2_trial, ecdysis.cfg.threshold)
