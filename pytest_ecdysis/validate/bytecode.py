"""Bytecode caches checked against their sources: a planted `.pyc` is found and removed.

A harness running with your rights (no sandbox) can write a `.pyc` into τ²'s `__pycache__` compiled from
the real source plus `reward = 1.0`, with the source's mtime and size in its header: Python then loads it
instead of the source, in every later process (the user's next ordinary run included). The scorer never
reads bytecode (`-B`, an empty `pycache_prefix`), but the trial processes and the plugin do.

`poisoned(root)` finds, under a protected package, every cache file Python would load for its source
(this interpreter's tag, a timestamp header matching the source's mtime and size, or a hash-based one)
whose code object is not the one compiling the source gives (compared as code objects, recursively:
bytecode, constants, names; `marshal` output itself is not byte-stable; pytest's assertion-rewrite caches
`*-pytest-*.pyc` against the rewritten code), deletes it and returns its path.
A file checked once is not compiled again while its size and mtime stay (`_SEEN`), so the check after each
editor call and sub-run costs a directory walk. Called by `integrity.take`; a file found is an integrity
change of the root `bytecode caches`. This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from pathlib import Path

#: The name `integrity.take` reports planted caches under.
BYTECODE = "bytecode caches"
_SEEN: dict[Path, tuple[int, int]] = {}  # verified cache file -> (size, mtime_ns) when verified


def poisoned(root: Path) -> list[Path]:
    """Cache files under `root` Python would load that do not hold their source's code; each is deleted
    (Python then compiles the source again). Unreadable or stale files are left alone (never loaded)."""
    found = []
    tag = f".{sys.implementation.cache_tag}"
    for cache in root.rglob("__pycache__/*.pyc"):
        try:
            stat = cache.stat()
        except OSError:
            continue
        if (
            _SEEN.get(cache) == (stat.st_size, stat.st_mtime_ns)
            or tag not in cache.name
            or ".opt-" in cache.name
        ):
            continue
        source = cache.parent.parent / (cache.name.split(".")[0] + ".py")
        if _matches(cache, source):
            _SEEN[cache] = (stat.st_size, stat.st_mtime_ns)
        else:
            found.append(cache)
            try:
                cache.unlink()
            except OSError:
                pass
    return found


def _matches(cache: Path, source: Path) -> bool:
    """True when `cache` would not be loaded for `source`, or holds exactly its code."""
    try:
        data, src = cache.read_bytes(), source.read_bytes()
        src_stat = source.stat()
    except OSError:
        return True  # no source: Python does not load a `__pycache__` file without one
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return True  # another interpreter's, or garbage Python rejects
    flags = int.from_bytes(data[4:8], "little")
    if flags == 0:  # timestamp-based: loaded only when mtime and size match the source's
        mtime, size = int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")
        if mtime != (int(src_stat.st_mtime) & 0xFFFFFFFF) or size != (src_stat.st_size & 0xFFFFFFFF):
            return True
    try:
        cached = marshal.loads(data[16:])
        compiled = _compile(src, source, pytest_cache="-pytest-" in cache.name)
    except Exception:  # noqa: BLE001 - an unreadable cache is rejected by Python too; a source that does not compile is checksummed
        return False
    return cached == compiled


def _compile(src: bytes, source: Path, *, pytest_cache: bool):
    """The code Python (or, for a `<name>.<tag>-pytest-<version>.pyc`, pytest's assertion rewriting) makes of
    `source`. pytest rewrites the asserts of every package of a distribution that registers a pytest plugin
    (`pytest_ecdysis` and `pytest_ecdysis_tau2` when installed from the wheel) and caches the result beside
    the source; its loader reads such a file back, so it is checked against the rewritten code."""
    if not pytest_cache:
        return compile(src, os.fspath(source), "exec", dont_inherit=True)
    import ast

    from _pytest.assertion.rewrite import rewrite_asserts  # pytest's own (its `_rewrite_test` does the same)

    tree = ast.parse(src, filename=os.fspath(source))
    rewrite_asserts(tree, src, os.fspath(source), None)
    return compile(tree, os.fspath(source), "exec", dont_inherit=True)
