"""τ²'s database hash from the touched records (`pytest_ecdysis_tau2.scoring.db_hash`): byte
for byte τ²'s `get_dict_hash(db.model_dump())` after gold replays, after replays missing their last write,
after changes of every kind, and whatever route a record was taken out by."""

from __future__ import annotations

import copy
import pickle

import pytest
from gold_replay import gold_simulation

from pytest_ecdysis_tau2.scoring import db_hash
from pytest_ecdysis_tau2.tasks import suite
from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2

#: write tasks of both domains (cancel, change, book, exchange, return): the replays change records
SAMPLE = [
    ("airline", "2"),
    ("airline", "8"),
    ("airline", "14"),
    ("airline", "21"),
    ("retail", "0"),
    ("retail", "3"),
    ("retail", "4"),
    ("retail", "5"),
]


def _tau2_hash(db: object) -> str:
    from tau2.utils.utils import get_dict_hash

    return get_dict_hash(db.model_dump())  # type: ignore[attr-defined]


def _replayed(domain: str, task_id: str, drop_last_write: bool) -> tuple[db_hash.Pieces, object]:
    """A tracked pristine environment with the task's gold replay (or all but its last write) set on it,
    as τ²'s environment evaluator does."""
    t = load_tau2()
    env = suite.get_environment(domain, copy_on_read=False)  # plain dicts, as the scorer's pristine ones
    pieces = db_hash.track(env.tools.db)
    run = t.SimulationRun.model_validate(gold_simulation(domain, task_id))
    messages = list(run.messages)
    if drop_last_write:
        last = max(i for i, m in enumerate(messages) if getattr(m, "tool_calls", None))
        del messages[last : last + 2]
    env.set_state(initialization_data=None, initialization_actions=None, message_history=messages)
    return pieces, env.tools.db


@pytest.mark.parametrize(("domain", "task_id"), SAMPLE)
@pytest.mark.parametrize("drop_last_write", [False, True])
def test_the_hash_of_a_replayed_database_is_tau2s(domain: str, task_id: str, drop_last_write: bool) -> None:
    """After a replay (gold, or missing its last write) the hash equals τ²'s, and the replay changed the
    database (so the kept texts of untouched records were not simply the whole answer)."""
    pieces, db = _replayed(domain, task_id, drop_last_write)
    pristine = _tau2_hash(suite.get_environment(domain).tools.db)
    assert db_hash.db_hash(pieces, db) == _tau2_hash(db)
    if not drop_last_write:
        assert _tau2_hash(db) != pristine, "the gold replay changed nothing: the test proves little"


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_every_gold_replay_hashes_as_tau2(domain: str) -> None:
    """All 50 airline and 114 retail gold replays, whole and without their last write."""
    for task_id in suite.all_tasks(domain):
        for drop in (False, True):
            try:
                pieces, db = _replayed(domain, task_id, drop)
            except ValueError:  # no write to drop (a read-only task)
                continue
            assert db_hash.db_hash(pieces, db) == _tau2_hash(db), (domain, task_id, drop)


@pytest.fixture(scope="module")
def airline() -> tuple[db_hash.Pieces, object]:
    env = suite.get_environment("airline", copy_on_read=False)
    return db_hash.track(env.tools.db), env.tools.db


def _fresh() -> tuple[db_hash.Pieces, object]:
    db = suite.get_environment("airline", copy_on_read=False).tools.db
    return db_hash.track(db), db


def test_routes_that_hand_out_records_are_recorded() -> None:
    """Each way a record can leave its collection marks it (`get`, `setdefault`, `pop`, indexing, a
    `dict(...)` copy through `keys()`); ways that may hand out all mark the collection whole."""
    pieces, db = _fresh()
    res = db.reservations
    assert isinstance(res, db_hash.Tracked) and res.touched == set()
    key = sorted(dict.keys(res))[0]
    res.get(key)
    res.setdefault(sorted(dict.keys(res))[1])
    assert res.touched == {key, sorted(dict.keys(res))[1]}
    assert dict(res) == {**res}  # both copies go through keys() and indexing: every key recorded
    assert res.touched == set(dict.keys(res))
    for route in (
        lambda d: d.values(),
        lambda d: d.items(),
        lambda d: d.copy(),
        lambda d: copy.deepcopy(d),
        lambda d: pickle.dumps(d),
        lambda d: d | {},
    ):
        pieces, db = _fresh()
        route(db.users)
        assert db.users.touched is db_hash._ALL
        assert db.reservations.touched == set()


def test_changes_of_every_kind_hash_as_tau2() -> None:
    """A nested field changed, a record replaced, removed, added under a new key, a collection handed out
    whole, a collection or the database object replaced: τ²'s hash each time."""
    pieces, db = _fresh()
    res = db.reservations
    first, second, third = sorted(dict.keys(res))[:3]
    res[first].flights[0].price += 1  # nested, in place
    assert db_hash.db_hash(pieces, db) == _tau2_hash(db)
    res[second] = res.pop(third)  # moved
    assert db_hash.db_hash(pieces, db) == _tau2_hash(db)
    res["ZZZZZZ"] = res[first].model_copy(update={"reservation_id": "ZZZZZZ"})  # added
    del res[first]
    assert db_hash.db_hash(pieces, db) == _tau2_hash(db)
    for flight in db.flights.values():  # a search: every flight handed out
        flight.flight_number += "!"
        break
    assert db_hash.db_hash(pieces, db) == _tau2_hash(db)
    db.__dict__["users"] = dict(db.users)  # a collection replaced (no longer tracked)
    next(iter(db.users.values())).name.first_name = "Changed"
    assert db_hash.db_hash(pieces, db) == _tau2_hash(db)
    other = db.model_copy(deep=True)
    assert db_hash.db_hash(pieces, other) == _tau2_hash(other)


def test_an_untouched_database_hashes_as_tau2(airline: tuple[db_hash.Pieces, object]) -> None:
    pieces, db = airline
    assert db_hash.db_hash(pieces, db) == _tau2_hash(db)


@pytest.mark.parametrize(("domain", "task_id"), SAMPLE)
def test_a_diff_of_the_records_handed_out_is_the_whole_diff(domain: str, task_id: str) -> None:
    """`touched_include` leaves out only records neither database handed out: the diff of a gold replay
    against the same replay missing its last write is the diff of the whole dumps, entry for entry."""
    from pytest_ecdysis_tau2.scoring.scorer import _bounded

    _, gold = _replayed(domain, task_id, False)
    _, short = _replayed(domain, task_id, True)
    include = db_hash.touched_include(short, gold)
    whole = _bounded(short.model_dump(mode="json"), gold.model_dump(mode="json"))  # type: ignore[attr-defined]
    assert whole, "the replays do not differ: the test proves little"
    assert (
        _bounded(
            short.model_dump(mode="json", include=include),  # type: ignore[attr-defined]
            gold.model_dump(mode="json", include=include),  # type: ignore[attr-defined]
        )
        == whole
    )
    assert any(v is not True for v in include.values()), include  # some collection was cut to its records
