"""Up to C trials in flight in one worker (`--ecdysis-concurrency C`), one pytest case per task x trial.

Against a real endpoint a trial waits on the model almost all the time, so a worker runs its next C
trials in threads of its own process (a thread costs far less memory than a worker and its scorer) while
pytest still sets up and reports the cases one by one, in order. The case's `tau2_trial` fixture calls
`TrialPool.result(item)`: it starts every not-yet-started case of this worker's share up to C ahead of
`item` (the share is `pytest_ecdysis.run.xdist_schedule.own_positions`, the same rule the controller's
scheduler uses), then waits for the item's own trial. A case outside the share (a crashed worker's,
handed over) runs when asked, as without concurrency.

Only `run_trial` runs in the threads; the fixture records the result, fetches the ground truth and fails
the case in pytest's thread, as before. A trial's outcome does not depend on which thread ran it or
when: each trial has its own clients, budget, environment and agent, the scorer client serialises its
requests, and the simulated model's draws depend on the trial header and the run nonce only
(docs/simulated-model.md). The threads are daemons: a session stopped early (`-x`, Ctrl-C) does not
wait for trials started ahead, and at most C - 1 such trials are wasted.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from pytest_ecdysis.run.xdist_schedule import own_positions

POOL_KEY = pytest.StashKey["TrialPool"]()


class TrialPool:
    """C daemon threads running trials of one worker's share ahead of pytest.

    `keys`: the worker's cases in the order pytest will ask for them; `run(key)` runs one trial (raises
    what `run_trial` raises, re-raised by `result`).
    """

    def __init__(self, keys: list[Any], run: Callable[[Any], Any], concurrency: int) -> None:
        self.order = {key: n for n, key in enumerate(keys)}
        self.keys, self.run, self.concurrency = keys, run, concurrency
        self.futures: dict[Any, Future] = {}  # started ahead, not yet asked for
        self.taken: set[Any] = set()  # asked for: never started ahead again
        self.todo: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        for n in range(concurrency):
            threading.Thread(target=self._serve, name=f"ecdysis-trial-{n}", daemon=True).start()

    def result(self, key: Any) -> Any:
        """The trial of `key`, started now if it was not started ahead; waits for it."""
        with self.lock:
            position = self.order.get(key)
            if position is not None:
                for ahead in self.keys[position : position + self.concurrency]:
                    if ahead not in self.taken:
                        self._submit(ahead)
            future = self.futures.pop(key, None) or self._submit(key, keep=False)
            self.taken.add(key)
        return future.result()

    def _submit(self, key: Any, keep: bool = True) -> Future:
        if key in self.futures:
            return self.futures[key]
        future: Future = Future()
        if keep:
            self.futures[key] = future
        self.todo.put((key, future))
        return future

    def _serve(self) -> None:
        while True:
            key, future = self.todo.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self.run(key))
            except BaseException as exc:  # noqa: BLE001 - handed to the case's fixture, which classifies it
                future.set_exception(exc)


def pool_for(
    request: pytest.FixtureRequest, fixture: str, run: Callable[[Any], Any], concurrency: int
) -> TrialPool:
    """The session's pool: keys are the `fixture` params of this worker's share of `session.items`."""
    config = request.config
    pool = config.stash.get(POOL_KEY, None)
    if pool is None:
        items = request.session.items
        keys = []
        for position in own_positions(len(items), config):
            callspec = getattr(items[position], "callspec", None)
            if callspec is not None and fixture in callspec.params:
                keys.append(callspec.params[fixture])
        pool = config.stash[POOL_KEY] = TrialPool(keys, run, concurrency)
    return pool
