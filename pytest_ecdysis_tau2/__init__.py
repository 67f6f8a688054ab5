"""τ²-bench airline and retail as pytest task suites (`tau2-airline`, `tau2-retail`).

Run them with `pytest pytest_ecdysis_tau2 -n 2` in this repository or `pytest --pyargs pytest_ecdysis_tau2`
when installed. Each task x trial is one pytest case (`test_airline[3-t0]`). Nothing heavy is imported
here: tau2 is imported lazily through `pytest_ecdysis_tau2.tau2lib.load_tau2`.
"""
