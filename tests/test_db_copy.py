"""A trial's database copied record by record on first read (`tasks.db_copy`): the same databases, the
same τ² hashes and rewards as a whole copy, and the shared pristine records never changed."""

from __future__ import annotations

import copy
import pickle

import pytest
from gold_replay import gold_simulation

from pytest_ecdysis_tau2.tasks import suite
from pytest_ecdysis_tau2.tasks.db_copy import CopyOnRead
from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2


def _hash(db: object) -> str:
    from tau2.utils.utils import get_dict_hash

    return get_dict_hash(db.model_dump())  # type: ignore[attr-defined]


def _replay(domain: str, task_id: str, copy_on_read: bool) -> object:
    """The database after the task's gold replay, set on a fresh environment as τ²'s evaluator does."""
    t = load_tau2()
    env = suite.get_environment(domain, copy_on_read=copy_on_read)
    run = t.SimulationRun.model_validate(gold_simulation(domain, task_id))
    task = suite.get_task(domain, task_id)
    initial = task.initial_state
    env.set_state(
        initialization_data=initial.initialization_data if initial else None,
        initialization_actions=initial.initialization_actions if initial else None,
        message_history=list(run.messages),
    )
    return env.tools.db


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_every_gold_replay_leaves_the_database_a_whole_copy_would(domain: str) -> None:
    """Every task's gold writes, replayed on a copy-on-read database, give τ²'s hash of the same replay on a
    whole copy; the replays change databases (so the comparison is not of pristine ones) and leave the
    process's shared pristine records as read from disk."""
    pristine_hash = _hash(domain_db(domain))
    changed = 0
    for task_id in suite.split_ids(domain, "all"):
        lazy = _hash(_replay(domain, task_id, copy_on_read=True))
        assert lazy == _hash(_replay(domain, task_id, copy_on_read=False)), task_id
        changed += lazy != pristine_hash
    assert changed > 10, changed
    shared = suite._pristine_db(domain)[0].db
    assert _hash(shared) == pristine_hash  # no replay wrote into a shared record


def domain_db(domain: str) -> object:
    """The domain's database as τ² reads it from disk, in no cache of ours."""
    return suite.domain_module(domain).get_environment().tools.db


@pytest.mark.parametrize(("domain", "task_id"), [("airline", "2"), ("airline", "8"), ("retail", "5")])
def test_a_gold_replay_hashes_as_on_a_whole_copy(domain: str, task_id: str) -> None:
    assert _hash(_replay(domain, task_id, True)) == _hash(_replay(domain, task_id, False))


def test_records_are_private_whichever_way_they_leave() -> None:
    """A record handed out by indexing, `get`, `values()`, `items()`, `dict(...)`, `{**d}`, `pop`, a pickle or
    a deep copy is the trial's own: changing it changes no other trial's database and not the shared one."""
    first = suite.get_environment("airline").tools.db
    res = first.reservations
    assert isinstance(res, CopyOnRead)
    key, other, third, fourth = sorted(dict.keys(res))[:4]
    shared = suite._pristine_db("airline")[0].db.reservations
    routes = (
        lambda d: d[key],
        lambda d: d.get(key),
        lambda d: next(v for k, v in d.items() if k == key),
        lambda d: [v for v in d.values() if v.reservation_id == key][0],
        lambda d: dict(d)[key],
        lambda d: {**d}[key],
        lambda d: d.copy()[key],
        lambda d: pickle.loads(pickle.dumps(d))[key],
        lambda d: copy.deepcopy(d)[key],
    )
    for route in routes:
        db = suite.get_environment("airline").tools.db
        record = route(db.reservations)
        assert record is not shared[key]
        record.passengers.clear()  # a change in place, as τ²'s tools make them
        assert suite.get_environment("airline").tools.db.reservations[key].passengers
        assert shared[key].passengers
    popped = res.pop(other)
    assert popped is not shared[other] and other not in res and other in shared
    res[third] = res[fourth]  # set: the trial's value, never replaced from the pristine pickle
    assert res[third] is res[fourth]
    del res[fourth]
    assert fourth not in res and res.get(fourth) is None and fourth in shared
    assert res.setdefault("NEW001", popped) is popped and res["NEW001"] is popped


def test_an_untouched_copy_dumps_and_compares_as_the_pristine_database() -> None:
    """Read at C level (pydantic's dump, ==) an untouched copy is the database as read, in τ²'s hash too."""
    db = suite.get_environment("airline").tools.db
    shared = suite._pristine_db("airline")[0].db
    assert db is not shared and db.reservations == shared.reservations
    assert _hash(db) == _hash(shared) == _hash(domain_db("airline"))
    assert db.model_fields_set == shared.model_fields_set


def test_telecom_fields_that_are_not_collections_are_copied_whole() -> None:
    """Telecom's tables are lists: each environment gets lists of its own."""
    a = suite.get_environment("telecom").tools.db
    b = suite.get_environment("telecom").tools.db
    name = next(n for n, v in vars(a).items() if isinstance(v, list) and v)
    assert getattr(a, name) is not getattr(b, name)
    assert getattr(a, name)[0] is not getattr(b, name)[0]
    assert _hash(a) == _hash(b)
