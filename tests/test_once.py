"""tests/once.py: an input built once per session is built once, read by every later caller, and a failed
build fails every later caller with the first one's error instead of building again."""

from __future__ import annotations

from pathlib import Path

import pytest
from once import once_per_session, shared_root


def test_a_second_caller_reads_what_the_first_built(tmp_path_factory: pytest.TempPathFactory) -> None:
    calls: list[Path] = []

    def build(place: Path) -> None:
        calls.append(place)
        (place / "out.txt").write_text("built")

    first = once_per_session(tmp_path_factory, "test-once-ok", build)
    second = once_per_session(tmp_path_factory, "test-once-ok", build)
    assert first == second == calls[0] and len(calls) == 1
    assert (second / "out.txt").read_text() == "built"
    assert first.parent == shared_root(tmp_path_factory)


def test_a_failed_build_is_not_retried(tmp_path_factory: pytest.TempPathFactory) -> None:
    calls = []

    def build(place: Path) -> None:
        calls.append(place)
        raise RuntimeError("the evolution exited 1")

    with pytest.raises(RuntimeError, match="exited 1"):
        once_per_session(tmp_path_factory, "test-once-bad", build)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)'test-once-bad' failed to build earlier.*exited 1"):
        once_per_session(tmp_path_factory, "test-once-bad", build)
    assert len(calls) == 1
