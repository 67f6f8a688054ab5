"""A trial's copy of a τ² database, made record by record when a record is first handed out.

A trial needs a database of its own (τ²'s tools change records in place), and copying a whole one per trial
was most of a trial's CPU: airline's 2,800 records take 0.2-0.5 CPU s to unpickle (reservations alone,
2,000 of them, about half), while a trial reads a handful of users and reservations and searches the 300
flights. `Pristine` keeps one database per process, read from disk once, with each record of each
top-level collection (a `dict` field: flights, users, reservations, orders, products) also pickled on its
own. `Pristine.copy()` gives a new database object whose collections are `CopyOnRead` dicts: they hold the
shared pristine records, and hand out (`d[key]`, `get`, `values()`, `items()`, iteration that yields
values, `pop`, ...) only a private copy of a record, made from its pickle the first time it is asked for
and kept from then on. A collection that could hand out every record at once (`values()`, `items()`,
`copy()`, `dict(d)`, `{**d}`, pickling) copies every record first.

This rests on what `scoring.db_hash` (the scorer's `Tracked` dict) rests on: a τ² record can be reached
only through its collection (records refer to each other by id), so a record never handed out is never
changed, and reading the shared one at C level (pydantic's `model_dump`, `==`, `json.dumps` walks the
storage) sees the same content a copy would have. Fields that are not such a collection (telecom's lists,
scalars) are copied whole per trial, as before. Checked against a whole copy on the gold replays of every
τ² task (tests/test_db_copy.py).
"""

from __future__ import annotations

import pickle
import threading
from typing import Any


def _whole(name: str) -> Any:
    """The `dict` method `name` as a method of `HandOut` that reports every record handed out first."""
    method = getattr(dict, name)

    def whole(self: HandOut, *args: Any, **kwargs: Any) -> Any:
        self._all_out()
        return method(self, *args, **kwargs)

    whole.__name__ = name
    return whole


class HandOut(dict):
    """A database collection that reports each record before it leaves (`_out(key)`), each key set or
    removed (`_set(key)`), and every record at once (`_all_out()`) for a route that may hand them all out
    (`values()`, `items()`, `copy()`, `update`, `|`, pickling, ...). Subclasses: `CopyOnRead` here (a trial's
    copy), `scoring.db_hash.Tracked` (the scorer's record of what changed).

    Overriding `__iter__` keeps CPython's fast dict copy (`dict(d)`, `{**d}`, `update(d)`) off the storage:
    those go through `keys()` and `__getitem__`, so they are reported too."""

    __slots__ = ()

    def _out(self, key: Any) -> None:
        raise NotImplementedError

    def _set(self, key: Any) -> None:
        raise NotImplementedError

    def _all_out(self) -> None:
        raise NotImplementedError

    def __getitem__(self, key: Any) -> Any:
        self._out(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._out(key)
        return super().get(key, default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._out(key)
        self._set(key)
        return super().setdefault(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._set(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._set(key)
        super().__delitem__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._out(key)
        self._set(key)
        return super().pop(key, *default)

    def __iter__(self) -> Any:
        return super().__iter__()

    def __reversed__(self) -> Any:
        return super().__reversed__()

    values = _whole("values")
    items = _whole("items")
    popitem = _whole("popitem")
    update = _whole("update")
    clear = _whole("clear")
    copy = _whole("copy")
    __or__ = _whole("__or__")
    __ror__ = _whole("__ror__")
    __ior__ = _whole("__ior__")

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickle, copy, deepcopy: a plain dict of every record
        self._all_out()
        return (dict, (dict.copy(self),))

    def __reduce__(self) -> Any:
        return self.__reduce_ex__(2)


class CopyOnRead(HandOut):
    """A collection over shared pristine records that hands out only private copies (module docstring).

    `pickles` maps each pristine key to its record's pickle; `own` holds the keys whose stored value is
    this trial's (copied, set by the trial, or added or removed by it: never restored from its pickle)."""

    __slots__ = ("pickles", "own")

    def __init__(self, shared: dict[Any, Any], pickles: dict[Any, bytes]) -> None:
        super().__init__(shared)
        self.pickles = pickles
        self.own: set[Any] = set()

    def _out(self, key: Any) -> None:
        if key in self.own or key not in self.pickles or not dict.__contains__(self, key):
            return
        dict.__setitem__(self, key, pickle.loads(self.pickles[key]))
        self.own.add(key)

    def _set(self, key: Any) -> None:
        self.own.add(key)

    def _all_out(self) -> None:
        if len(self.own) < len(self):
            for key in list(dict.keys(self)):
                self._out(key)


class Pristine:
    """One database as read from disk, and what `copy()` needs: each collection's records pickled one by
    one, the other fields pickled whole. Build it once per process; `copy()` is thread-safe (it only
    reads)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.collections: dict[str, dict[Any, bytes]] = {}
        self.rest: dict[str, bytes] = {}
        fields: dict[str, Any] = getattr(type(db), "model_fields", None) or {}
        for name, value in vars(db).items() if fields else ():
            if name not in fields:
                continue
            if type(value) is dict and all(type(k) is str for k in value):
                self.collections[name] = {
                    k: pickle.dumps(v, pickle.HIGHEST_PROTOCOL) for k, v in value.items()
                }
            else:
                self.rest[name] = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        self.lazy = bool(fields)
        self._whole: bytes | None = None
        self._lock = threading.Lock()

    def whole_copy(self) -> Any:
        """A database of its own with every record copied now, in plain dicts (one unpickling of the whole,
        pickled on the first call)."""
        with self._lock:
            if self._whole is None:
                self._whole = pickle.dumps(self.db, pickle.HIGHEST_PROTOCOL)
        return pickle.loads(self._whole)

    def copy(self) -> Any:
        """A database of the trial's own (module docstring); a database that is not a pydantic model is
        copied whole."""
        if not self.lazy:
            return self.whole_copy()
        update: dict[str, Any] = {
            name: CopyOnRead(getattr(self.db, name), pickles) for name, pickles in self.collections.items()
        }
        update.update({name: pickle.loads(data) for name, data in self.rest.items()})
        db = self.db.model_copy(update=update)  # a shallow copy with these fields: no validation
        object.__setattr__(db, "__pydantic_fields_set__", set(self.db.__pydantic_fields_set__))
        return db
