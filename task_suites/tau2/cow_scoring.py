"""Copy-on-write scoring: each trajectory is scored by τ²'s evaluator in a forked child of the scorer
process, over environments built once in the parent (issue 18 item 3).

τ²'s `EnvironmentEvaluator` builds two fresh environments per trial (the agent's, then the gold one) and
replays the tool calls on them; building one means a full copy of the domain database (about 150,000
pydantic objects for airline), which is most of the time a trial's score costs. Here the scorer process
builds two pristine environments per domain once; for every request it forks, and in the child the
evaluator's first two environment constructions return those two objects, which the child may mutate
freely: the operating system copies only the memory pages the child touches, and the child exits after
answering. τ²'s evaluator code runs unchanged on environments with the same content as its own
constructor's, so rewards are identical (tested against τ²'s default path in `tests/test_scoring_speed.py`;
`benchmarks/bench_scoring.py` prints the speed-up).

Used only where `os.fork` exists; elsewhere `scorer.score` runs in the process on unpickled copies. No
harness code is ever imported here (the scorer process's rule).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from typing import Any

#: per domain: the two environments the child hands out (agent's, then gold), built once in the parent.
_PRISTINE: dict[str, list[Any]] = {}
#: in a forked child: how many pristine environments of each domain were handed out.
_HANDED: dict[str, int] | None = None


def available() -> bool:
    """True where scoring can fork (POSIX)."""
    return hasattr(os, "fork")


def prepare(domain: str) -> None:
    """Build the domain's two pristine environments once, and keep the collector off them (so a child's
    garbage collection does not touch, and so copy, their pages)."""
    if domain in _PRISTINE:
        return
    from . import suite

    _PRISTINE[domain] = [suite.get_environment(domain), suite.get_environment(domain)]
    gc.collect()
    gc.freeze()


def environment(domain: str) -> Any:
    """A fresh environment of `domain`: a pristine one inside a scoring child (twice per domain), else a copy."""
    from . import suite

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


def score_in_child(domain: str, score: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run `score()` in a forked child and return its JSON-able response.

    The child's failure is a response `{"ok": false, "error": ...}`, never an exception in the parent.
    """
    global _HANDED
    prepare(domain)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer once, then leave without running any exit handler of the parent
        status = 0
        try:
            os.close(read_fd)
            _HANDED = {}
            try:
                data = json.dumps(score())
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
    return json.loads(data)
