"""τ²'s database hash, computed from the records a scoring child changed.

τ²'s environment evaluator compares the agent's and the gold database by `get_db_hash()`:
`sha256(json.dumps(db.model_dump(), sort_keys=True, default=str))` (`tau2.utils.utils.get_dict_hash`), a
walk over the whole database (about 0.12 CPU s for airline's 2,800 records, 0.07 s for retail's; most of a
scoring child's time). A scoring child (`cow_scoring`) gets a pristine environment and replays at most a
few dozen tool calls on it, so almost every record is as it was. Here:

- `track(db)` (in the scorer process, on each pristine environment, before any fork) replaces every
  top-level collection of the database (a `dict` field: flights, users, reservations, orders, products)
  by a `Tracked` dict with the same items, which records the key of every record it hands out or that
  is set or removed; a call that could hand out all of them at once (`values()`, `items()`, `copy()`,
  `pop`-all, ...) marks the whole collection. A record can be reached only through its collection (τ²'s
  records refer to each other by id), so a record never handed out is unchanged. It also keeps, per
  collection, each record's JSON text as `json.dumps` writes it inside the whole (`"<key>": {...}`).
- `db_hash(db)` (in the child) builds the same text from the kept pieces of untouched records and a fresh
  `model_dump` (with pydantic's `include`, so through the database's own serialiser) of the touched ones,
  and hashes it: byte for byte τ²'s text, so the same hash. Anything it does not recognise (a database
  object or collection replaced, keys that are not all strings) is hashed τ²'s way; a collection that
  handed out everything is dumped again whole (airline's flight searches iterate over every flight).

Checked against τ²'s own hash on every gold replay and on changed databases (`tests/test_db_hash.py`), and
by the rewards of all 164 gold replays (`benchmarks/bench_scoring.py`). Runs only in the scorer process;
no harness code is imported here.
"""

from __future__ import annotations

import enum
import hashlib
import json
from typing import Any, Final, Literal

from ..tasks.db_copy import HandOut


class _Every(enum.Enum):
    """The type of `_ALL` (an enum member, so `touched is _ALL` narrows `touched` for mypy)."""

    ALL = "all"


_ALL: Final = _Every.ALL  # a marker: every record of the collection may have been handed out


class Tracked(HandOut):
    """A database collection that records which keys it handed out or changed (`touched`, or `_ALL`); the
    routes a record leaves by are `tasks.db_copy.HandOut`'s."""

    __slots__ = ("touched",)

    def __init__(self, items: dict[str, Any]) -> None:
        super().__init__(items)
        self.touched: set[str] | Literal[_Every.ALL] = set()

    def _out(self, key: Any) -> None:
        if self.touched is not _ALL:
            self.touched.add(key)

    _set = _out

    def _all_out(self) -> None:
        self.touched = _ALL


class Pieces:
    """What `track` keeps of one pristine database: its tracked collections and their records' text."""

    def __init__(self, db: Any, texts: dict[str, dict[str, str]], exact: bool) -> None:
        self.db = db
        self.collections = {name: getattr(db, name) for name in texts}
        self.texts = texts
        self.exact = exact  # False: `model_dump` has keys that are not fields (never the fast way)


def _text(key: str, value: Any) -> str:
    return json.dumps(key) + ": " + json.dumps(value, sort_keys=True, default=str)


def track(db: Any, same_as: Pieces | None = None) -> Pieces:
    """Make `db`'s top-level collections `Tracked` (in place) and keep each record's text (module
    docstring). Call on a pristine database, before any tool call and before forking; `same_as`: the
    pieces of another pristine copy of the same database, whose texts are shared (not computed again)."""
    if same_as is not None:
        for name in same_as.texts:
            db.__dict__[name] = Tracked(getattr(db, name))
        return Pieces(db, same_as.texts, same_as.exact)
    dumped = db.model_dump()
    texts: dict[str, dict[str, str]] = {}
    exact = set(dumped) == set(type(db).model_fields)
    for name in type(db).model_fields if exact else ():
        value = getattr(db, name)
        if type(value) is dict and name in dumped and all(type(k) is str for k in value):
            db.__dict__[name] = Tracked(value)
            texts[name] = {key: _text(key, record) for key, record in dumped[name].items()}
    return Pieces(db, texts, exact)


def db_hash(pieces: Pieces, db: Any) -> str:
    """τ²'s `get_dict_hash(db.model_dump())` of `db`, from the records its collections handed out
    (module docstring); τ²'s own computation when `db` is not the tracked database as `track` left it."""
    fast = (
        db is pieces.db
        and pieces.exact
        and all(
            db.__dict__.get(n) is c and (c.touched is _ALL or all(type(k) is str for k in c.touched))
            for n, c in pieces.collections.items()
        )
    )
    if not fast:
        return _sha(json.dumps(db.model_dump(), sort_keys=True, default=str))
    include: dict[str, Any] = {n: True for n in type(db).model_fields if n not in pieces.collections}
    dirty: dict[str, set[str] | None] = {}  # None: the whole collection dumped again
    for name, coll in pieces.collections.items():
        if coll.touched is _ALL:
            dirty[name], include[name] = None, True
            continue
        known, present = pieces.texts[name], dict.keys(coll)
        keys = {k for k in coll.touched if k in present} | {k for k in present if k not in known}
        dirty[name] = keys
        if keys:
            include[name] = {k: True for k in keys}
    fresh = db.model_dump(include=include) if include else {}
    parts = {
        name: json.dumps(value, sort_keys=True, default=str)
        for name, value in fresh.items()
        if name not in pieces.collections or dirty[name] is None
    }
    for name, coll in pieces.collections.items():
        changed = dirty[name]
        if changed is None:
            continue
        known, new = pieces.texts[name], fresh.get(name, {})
        texts = [_text(k, new[k]) if k in changed else known[k] for k in sorted(dict.keys(coll))]
        parts[name] = "{" + ", ".join(texts) + "}"
    return _sha("{" + ", ".join(json.dumps(n) + ": " + parts[n] for n in sorted(parts)) + "}")


def touched_include(*dbs: Any) -> dict[str, Any]:
    """A pydantic `include` for `model_dump` of `dbs` (databases `track`ed from the same pristine data, as a
    scoring child's agent and gold environments are) that leaves out the records none of them handed out:
    those are the pristine ones in every database, so a comparison of the dumps loses nothing. A field that
    is not a tracked collection in every database, or a collection that handed out everything, is kept
    whole; {} when nothing differs that could."""
    include: dict[str, Any] = {}
    for name in type(dbs[0]).model_fields:
        collections = [db.__dict__.get(name) for db in dbs]
        if not all(isinstance(c, Tracked) for c in collections):
            include[name] = True
        elif any(c.touched is _ALL for c in collections):
            include[name] = True
        elif keys := set().union(*(c.touched for c in collections)):
            include[name] = {k: True for k in keys}
    return include


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
