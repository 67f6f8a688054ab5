"""Build an expensive, read-only test input once per test session, also when pytest-xdist spreads its readers
over several workers (a module- or session-scoped fixture alone runs once per worker: the browser test's
18-minute evolution ran twice under `-n 2`).

The first worker to ask builds the input under a file lock in the directory its session's workers share;
the others wait on the lock and read what it built. A build that failed is not retried: every later reader
fails with the first one's error. Consumers must only read what was built (tests that change a project
build their own). The recipe is pytest-xdist's "Making session-scoped fixtures execute only once"
(https://pytest-xdist.readthedocs.io/en/stable/how-to.html).
"""

from __future__ import annotations

import os
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory this session's workers share: the parent of a worker's base temp directory under
    xdist (`pytest-N/popen-gw0` -> `pytest-N`), else the session's own base temp directory."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_session(
    tmp_path_factory: pytest.TempPathFactory, key: str, build: Callable[[Path], None]
) -> Path:
    """The directory `build(directory)` filled, built at most once per session (whichever worker asks first).

    `key` names the input (a file-name-safe string). Raises pytest's Failed when the build failed, here or
    in another worker, with that build's traceback."""
    root = shared_root(tmp_path_factory)
    place, failed = root / f"once-{key}", root / f"once-{key}.failed"
    with FileLock(str(root / f"once-{key}.lock")):
        if failed.is_file():
            pytest.fail(
                f"the shared input {key!r} failed to build earlier in this session:\n{failed.read_text()}"
            )
        if not (place / ".built").is_file():
            shutil.rmtree(place, ignore_errors=True)
            place.mkdir()
            try:
                build(place)
            except (Exception, pytest.fail.Exception):  # not a skip or Ctrl-C: those are not a result
                failed.write_text(traceback.format_exc()[-6000:])
                raise
            (place / ".built").write_text("")
    return place
