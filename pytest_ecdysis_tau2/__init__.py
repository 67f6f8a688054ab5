"""τ²-bench airline, retail and telecom as pytest task suites (`tau2-airline`, `tau2-retail`, `tau2-telecom`).

Run them with `pytest pytest_ecdysis_tau2 -n 2` in this repository or `pytest --pyargs pytest_ecdysis_tau2`
when installed. Each task x trial is one pytest case (`test_airline[3-t0]`). Nothing heavy is imported
here: tau2 is imported lazily through `pytest_ecdysis_tau2.tasks.tau2lib.load_tau2`.
"""

from pathlib import Path

#: The directory that holds this package (the checkout, a sub-run's copy, or site-packages): what the
#: scorer and the harness's sandboxed process put on their import path. Not its parent: that showed the
#: checkout's sibling directories (other checkouts, a sub-run's run directory) to harness code.
SUITE_ROOT = Path(__file__).resolve().parent.parent
