"""Copy-on-write scoring: each trajectory is scored by τ²'s evaluator in a forked child of the scorer
process, over environments built once in the parent.

τ²'s `EnvironmentEvaluator` builds two fresh environments per trial (the agent's, then the gold one) and
replays the tool calls on them; building one means a full copy of the domain database (about 150,000
pydantic objects for airline), which is most of the time a trial's score costs. Here the scorer process
builds two pristine environments per domain once; for every request it forks, and in the child the
evaluator's first two environment constructions return those two objects, which the child may mutate
freely: the operating system copies only the memory pages the child touches, and the child exits after
answering. τ²'s evaluator code runs unchanged on environments with the same content as its own
constructor's, so rewards are identical (tested against τ²'s default path in `tests/test_scorer_cow.py`;
`benchmarks/bench_scoring.py` prints the speed-up).

The gold environment's final database depends on the task only (τ²'s initial state and gold actions,
replayed on the same pristine database), so its two hashes (`get_db_hash`, `get_user_db_hash`, the walk
over the whole database that is most of a scoring child's time) are computed by the first child that
scores a task and reused by later children of the same task (k > 1 trials, the paired test's extra
trials, a validation's rescoring): the child still replays the gold actions, only the hash is not
recomputed. Every hash, the agent's and a task's first gold one, is computed from the records the
child's tool calls touched (`db_hash`: the other records' text is kept from the pristine database), byte
for byte the text τ² hashes.

Used only where `os.fork` exists; elsewhere `scorer.score` runs in the process on unpickled copies. No
harness code is ever imported here (the scorer process's rule).
"""

from __future__ import annotations

import functools
import gc
import json
import os
from collections.abc import Callable
from typing import Any

from . import db_hash

#: per domain: the two environments the child hands out (agent's, then gold), built once in the parent.
_PRISTINE: dict[str, list[Any]] = {}
#: per domain: what `db_hash.track` keeps of each pristine environment's database (same order).
_PIECES: dict[str, list[Any]] = {}
#: in a forked child: how many pristine environments of each domain were handed out.
_HANDED: dict[str, int] | None = None
#: (domain, task id) -> the gold environment's (db hash, user db hash), from the task's first scoring child.
_GOLD_HASHES: dict[tuple[str, str], list[str | None]] = {}
GOLD_HASH_KEY = "_gold_hashes"  # the child's answer carries the hashes it computed under this key


def available() -> bool:
    """True where scoring can fork (POSIX)."""
    return hasattr(os, "fork")


def prepare(domain: str) -> None:
    """Build the domain's two pristine environments once, and keep the collector off them (so a child's
    garbage collection does not touch, and so copy, their pages)."""
    if domain in _PRISTINE:
        return
    from ..tasks import suite

    _PRISTINE[domain] = [suite.get_environment(domain, copy_on_read=False) for _ in range(2)]
    first = db_hash.track(_PRISTINE[domain][0].tools.db)
    _PIECES[domain] = [first, db_hash.track(_PRISTINE[domain][1].tools.db, same_as=first)]
    gc.collect()
    gc.freeze()


def environment(domain: str) -> Any:
    """A fresh environment of `domain`: a pristine one inside a scoring child (twice per domain), else a copy."""
    from ..tasks import suite

    if _HANDED is not None and _HANDED.get(domain, 0) < len(_PRISTINE.get(domain, ())):
        k = _HANDED[domain] = _HANDED.get(domain, 0) + 1
        return _PRISTINE[domain][k - 1]
    return suite.get_environment(domain)


def used_environments(domain: str) -> tuple[Any, Any] | None:
    """Inside a scoring child after τ²'s evaluator ran: the (agent's, gold) environments it built, as it
    left them (so a DB diff needs no rebuild); None elsewhere."""
    if _HANDED is None or _HANDED.get(domain, 0) < 2:
        return None
    agent, gold = _PRISTINE[domain][:2]
    return agent, gold


def score_in_child(
    domain: str, score: Callable[[], dict[str, Any]], task_id: str | None = None
) -> dict[str, Any]:
    """Run `score()` in a forked child and return its JSON-able response; with `task_id`, the gold
    environment's hashes are reused from the task's earlier child (module docstring).

    The child's failure is a response `{"ok": false, "error": ...}`, never an exception in the parent.
    """
    global _HANDED
    prepare(domain)
    key = (domain, task_id) if task_id is not None else None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer once, then leave without running any exit handler of the parent
        status = 0
        try:
            os.close(read_fd)
            _HANDED = {}
            # τ²'s hash, from the records the child's tool calls touched (`db_hash`)
            for env, pieces in zip(_PRISTINE.get(domain, ()), _PIECES.get(domain, ()), strict=False):
                env.get_db_hash = functools.partial(_db_hash, env, pieces)
            computed = _gold_hashes(domain, key) if key is not None else None
            try:
                response = score()
                if computed and all(h is not ... for h in computed) and isinstance(response, dict):
                    response[GOLD_HASH_KEY] = computed
                data = json.dumps(response)
            except Exception as exc:
                data = json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            with os.fdopen(write_fd, "w") as out:
                out.write(data)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"ok": False, "error": f"the scoring child exited without an answer (wait status {status})"}
    response = json.loads(data)
    hashes = response.pop(GOLD_HASH_KEY, None) if isinstance(response, dict) else None
    if key is not None and hashes is not None:
        _GOLD_HASHES[key] = hashes
    return response


def _db_hash(env: Any, pieces: Any) -> str | None:
    """`env.get_db_hash()` as τ² computes it (`Environment.get_db_hash`), by `db_hash.db_hash`."""
    return None if env.tools is None else db_hash.db_hash(pieces, env.tools.db)


def _gold_hashes(domain: str, key: tuple[str, str]) -> list[Any] | None:
    """In a scoring child: make the gold environment (the evaluator's second construction) answer its
    hashes from the cache, or record them as it computes them; returns the list that records them
    (`...` until computed), or None when they came from the cache."""
    gold = _PRISTINE[domain][1]
    cached = _GOLD_HASHES.get(key)
    if cached is not None:
        gold.get_db_hash = lambda: cached[0]
        gold.get_user_db_hash = lambda: cached[1]
        return None
    computed: list[Any] = [..., ...]
    for n, name in enumerate(("get_db_hash", "get_user_db_hash")):
        method = getattr(gold, name)

        def recording(method: Callable[[], Any] = method, n: int = n) -> Any:
            computed[n] = method()
            return computed[n]

        setattr(gold, name, recording)
    return computed
