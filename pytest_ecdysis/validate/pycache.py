"""A bytecode cache for the trusted processes that read no other (the scorer), kept where harness code
cannot write it.

The scorer must not load bytecode a harness could have written (docs/evolution.md, "On every run"): a
`.pyc` planted in τ²'s `__pycache__` would rig the reward. Compiling every module from source instead
(`-B` and an empty `-X pycache_prefix`) costs about 3.7 CPU s more per scorer start (4.94 against 1.21 CPU s,
`benchmarks/bench_trusted_side.py`), paid by every worker of every suite run. This module gives those
processes a private cache instead, under three rules:

- it exists only while the sandbox is on (`validate.sandbox.enabled()`): harness processes then see the
  file system read-only and an empty `/tmp`, so they cannot write it. Without the sandbox a harness runs
  with your rights and could plant a file in any directory of yours: the scorer then compiles from source,
  as before;
- it is created fresh by the session's controller (`prepare`, a private `0700` directory from
  `tempfile.mkdtemp`, removed at exit), never reused from an earlier session (a harness of an earlier run
  without the sandbox could have written a directory that outlives it);
- only the session's own processes write it (`ENV_WRITE` = `1`); validation sub-runs inherit it read-only
  (`-B`: `validate.setup.subrun_env` sets `ENV_WRITE` = `0`), and an evolution checks it file by file, by
  size, modification and change time (`digests`), after every editor call and sub-run, as it checks the
  installed packages: the editor runs with your rights, and a change stops the evolution
  (`evolve.runs.TrustedRuns.check_integrity`).

Python itself checks each cached file against its source's modification time and size, so a changed
source is compiled again (in memory, under `-B`). This module must not import tau2, task suites or harness
code.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

#: The cache directory (set by the controller when the sandbox is on; inherited by workers and sub-runs).
ENV_DIR = "ECDYSIS_TRUSTED_PYCACHE"
#: "1" where the processes may write the cache (the session's own), "0" in validation sub-runs.
ENV_WRITE = "ECDYSIS_TRUSTED_PYCACHE_WRITE"


def prepare(sandbox_on: bool) -> Path | None:
    """At the controller's configure time: the cache this session's trusted processes use, or None.

    A sub-run (`ENV_DIR` given by its evolution, with `ENV_WRITE` = `0`) keeps its parent's; a session without
    the sandbox drops what it inherited; otherwise (also when a writable cache was inherited: another
    session's, whose scorers would write into it while this one checks it) a new private directory is made, exported in `ENV_DIR` (with `ENV_WRITE`
    = `1`) and removed at exit. A session nested in another (an editor's or a harness's pytest) must drop
    the variables first (`plugin.py` does, with the outer session's run id).
    """
    inherited = os.environ.get(ENV_DIR)
    if not sandbox_on:
        os.environ.pop(ENV_DIR, None)
        os.environ.pop(ENV_WRITE, None)
        return None
    if inherited and Path(inherited).is_dir() and os.environ.get(ENV_WRITE) == "0":
        return Path(inherited)  # a validation sub-run: its evolution's cache, read-only (`validate.setup`)
    path = Path(tempfile.mkdtemp(prefix="ecdysis-pycache-"))
    os.environ[ENV_DIR] = str(path)
    os.environ[ENV_WRITE] = "1"
    atexit.register(shutil.rmtree, path, True)
    return path


def flags(private: Path) -> list[str]:
    """Interpreter flags of a trusted process that must not load bytecode a harness could have written:
    the session's cache (`-X pycache_prefix=<cache>`, plus `-B` where it must not write), else none at all
    (`-B` and `private`, an empty directory of the caller's, as prefix)."""
    cache = os.environ.get(ENV_DIR)
    if cache and Path(cache).is_dir():
        return [*([] if os.environ.get(ENV_WRITE) == "1" else ["-B"]), "-X", f"pycache_prefix={cache}"]
    return ["-B", "-X", f"pycache_prefix={private}"]


def digests(path: Path | None = None) -> dict[str, str]:
    """`{relative path: "size:mtime_ns:ctime_ns"}` of every file in the cache (`ENV_DIR` by default; empty
    when there is none). The change time cannot be set back by an unprivileged process."""
    root = path or (Path(os.environ[ENV_DIR]) if os.environ.get(ENV_DIR) else None)
    out: dict[str, str] = {}
    if root is None or not root.is_dir():
        return out
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            try:
                st = os.stat(full, follow_symlinks=False)
            except OSError:
                continue
            out[os.path.relpath(full, root)] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return out


def changes(before: dict[str, str], after: dict[str, str], limit: int = 5) -> list[str]:
    """What differs between two `digests`, as `"trusted bytecode cache: <path> changed|added|removed"`."""
    diff = [f"{p} changed" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    diff += [f"{p} added" for p in sorted(set(after) - set(before))]
    diff += [f"{p} removed" for p in sorted(set(before) - set(after))]
    out = [f"trusted bytecode cache: {d}" for d in diff[:limit]]
    return out + ([f"trusted bytecode cache: and {len(diff) - limit} more"] if len(diff) > limit else [])
