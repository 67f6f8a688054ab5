"""The scorers' trusted bytecode cache (`pytest_ecdysis.validate.pycache`): made only where
the sandbox is on, fresh per session, read-only in sub-runs, never a route for a planted `.pyc`, and a
write into it is a change the evolution's check names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ecdysis.validate import pycache
from pytest_ecdysis.validate.setup import subrun_env


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(pycache.ENV_DIR, raising=False)
    monkeypatch.delenv(pycache.ENV_WRITE, raising=False)


def test_no_cache_without_the_sandbox(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the sandbox a harness could write any directory of the user's: no cache, and one inherited
    is dropped; the scorer then reads no bytecode (`-B`, the empty private prefix)."""
    monkeypatch.setenv(pycache.ENV_DIR, str(tmp_path))
    assert pycache.prepare(False) is None
    assert pycache.ENV_DIR not in os.environ and pycache.ENV_WRITE not in os.environ
    assert pycache.flags(tmp_path / "empty") == ["-B", "-X", f"pycache_prefix={tmp_path / 'empty'}"]


def test_a_session_makes_its_own_and_a_sub_run_reads_it(clean_env: None) -> None:
    """With the sandbox on the controller makes a fresh private directory its processes write; a
    validation sub-run's environment keeps it, read-only (`-B`)."""
    made = pycache.prepare(True)
    assert made is not None and made.is_dir() and (made.stat().st_mode & 0o777) == 0o700
    assert os.environ[pycache.ENV_WRITE] == "1"
    assert pycache.flags(Path("/nowhere")) == ["-X", f"pycache_prefix={made}"]
    env = subrun_env("sub-1", None)
    assert env[pycache.ENV_DIR] == str(made) and env[pycache.ENV_WRITE] == "0"
    os.environ[pycache.ENV_WRITE] = env[pycache.ENV_WRITE]  # as in the sub-run's controller
    assert pycache.prepare(True) == made, "a sub-run keeps its evolution's cache"
    assert pycache.flags(Path("/nowhere")) == ["-B", "-X", f"pycache_prefix={made}"]


def test_a_writable_cache_inherited_from_another_session_is_not_shared(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A session started from inside another (a test's pytest, an editor's) inherits that session's cache
    with `WRITE=1`: the outer session's scorers keep writing it, so this session's integrity checks saw
    "trusted bytecode cache: ... added" during its editor call and stopped (tests/adversarial/test_routes.py
    under `-n 2`). Only a sub-run's read-only cache (`WRITE=0`) is kept; otherwise a new one is made."""
    monkeypatch.setenv(pycache.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(pycache.ENV_WRITE, "1")
    made = pycache.prepare(True)
    assert made is not None and made != tmp_path and os.environ[pycache.ENV_DIR] == str(made)
    assert os.environ[pycache.ENV_WRITE] == "1"


def _victim(root: Path) -> Path:
    """A package whose `REWARD` is 0.0, with a planted `.pyc` beside it saying 1.0 that Python would load."""
    import importlib.util
    import py_compile

    package = root / "victim"
    package.mkdir()
    source = package / "__init__.py"
    source.write_text("REWARD = 0.0\n")
    fake = root / "fake.py"
    fake.write_text("REWARD = 1.0\n")
    stat = source.stat()
    os.utime(fake, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    target = importlib.util.cache_from_source(str(source))
    py_compile.compile(str(fake), cfile=target, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    data = bytearray(Path(target).read_bytes())
    data[12:16] = (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    Path(target).write_bytes(bytes(data))
    return package


@pytest.mark.parametrize("write", ["1", "0"])
def test_the_cache_never_loads_a_pyc_planted_beside_the_source(
    tmp_path: Path, write: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started with the cache's flags, an interpreter ignores the venv's `__pycache__` (where a harness
    without the sandbox planted its `.pyc`); it writes the cache only where the session may (`ENV_WRITE`)."""
    _victim(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv(pycache.ENV_DIR, str(cache))
    monkeypatch.setenv(pycache.ENV_WRITE, write)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    probe = ["-c", "import victim; print(victim.REWARD)"]
    plain = subprocess.run([sys.executable, *probe], env=env, capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == "1.0", "the planted bytecode is not loaded: the test proves nothing"
    for _ in range(2):  # the second start reads what the first wrote (when it may write)
        out = subprocess.run(
            [sys.executable, *pycache.flags(tmp_path / "unused"), *probe],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "0.0"
    written = [p.relative_to(cache).as_posix() for p in cache.rglob("*.pyc")]
    victim = [p for p in written if "/victim/" in p]
    assert (victim, bool(written)) == (([victim[0]], True) if write == "1" else ([], False)), written


def test_a_file_written_into_the_cache_is_a_change(tmp_path: Path) -> None:
    """What the evolution compares after every editor call and sub-run: a planted file, a rewrite with the
    same size and modification time (the change time moves), a removal."""
    (tmp_path / "a").mkdir()
    kept = tmp_path / "a" / "m.cpython-311.pyc"
    kept.write_bytes(b"x" * 16)
    gone = tmp_path / "a" / "n.cpython-311.pyc"
    gone.write_bytes(b"y")
    before = pycache.digests(tmp_path)
    assert pycache.changes(before, pycache.digests(tmp_path)) == []
    st = kept.stat()
    kept.write_bytes(b"z" * 16)
    os.utime(kept, ns=(st.st_atime_ns, st.st_mtime_ns))
    (tmp_path / "a" / "evil.cpython-311.pyc").write_bytes(b"e")
    gone.unlink()
    assert pycache.changes(before, pycache.digests(tmp_path)) == [
        "trusted bytecode cache: a/m.cpython-311.pyc changed",
        "trusted bytecode cache: a/evil.cpython-311.pyc added",
        "trusted bytecode cache: a/n.cpython-311.pyc removed",
    ]


def test_the_trusted_copy_is_compiled_once_and_its_bytecode_checked(tmp_path: Path) -> None:
    """`compile_tree` compiles the modules a sub-run imports from the pristine copy (not its harness's, which
    each sub-run replaces);
    a sub-run's copy whose cache file was changed or planted is an integrity change naming it."""
    import shutil

    from pytest_ecdysis.core.errors import IntegrityError
    from pytest_ecdysis.validate.integrity import tree_digests
    from pytest_ecdysis.validate.setup import TrustedTree, _check_copy

    pristine = tmp_path / "pristine"
    for path, text in (
        ("suite/__init__.py", ""),
        ("suite/scoring.py", "REWARD = 0.0\n"),
        ("harness/__init__.py", "X = 1\n"),
        ("tests/conftest.py", ""),
        ("tests/test_x.py", ""),
        ("scripts/tool.py", ""),
    ):
        (pristine / path).parent.mkdir(parents=True, exist_ok=True)
        (pristine / path).write_text(text)
    trusted = TrustedTree(
        checkout=tmp_path,
        pristine=pristine,
        harness_rel="harness",
        digests=tree_digests(pristine),
        pythonpath=["."],
    )
    trusted.compile_in_background()
    trusted.ready()
    tag = sys.implementation.cache_tag
    assert set(trusted.bytecode) == {
        f"suite/__pycache__/{name}.{tag}.pyc" for name in ("__init__", "scoring")
    } | {f"tests/__pycache__/conftest.{tag}.pyc"}  # what a sub-run imports: not the harness, tests, scripts
    copy = tmp_path / "copy"
    shutil.copytree(pristine, copy)
    (copy / "harness" / "__pycache__").mkdir()
    (copy / "harness" / "__pycache__" / f"__init__.{tag}.pyc").write_bytes(
        b"the candidate's own: not checked"
    )
    _check_copy(trusted, copy)  # unchanged outside the harness
    planted = copy / "suite" / "__pycache__" / f"scoring.{tag}.pyc"
    planted.write_bytes(planted.read_bytes() + b"\x00")
    with pytest.raises(IntegrityError, match=f"bytecode: suite/__pycache__/scoring.{tag}.pyc changed"):
        _check_copy(trusted, copy)
