"""Which cases each xdist worker runs when trials run concurrently (`--ecdysis-concurrency C > 1`).

A worker that keeps C trials in flight must know, before pytest asks for them, which cases are its own,
so it can start the next C in threads while pytest still reports them one by one. xdist's `--dist load`
sends cases in batches whose size depends on timing, so with C > 1 the controller uses
`FixedShareScheduling` instead (through xdist's `pytest_xdist_make_scheduler` hook): every worker gets,
up front, the cases at positions `i` of the collection with `i % workers == worker index`, the rule
`owns` states once for both sides. A case that reaches a worker outside its share (a crashed worker's
cases handed to the others) still runs, only without being started early.

Only `--dist load` (what `-n N` means by default) is replaced; any other `--dist` with C > 1 is a usage
error at configure time (`check_dist`). This module imports xdist lazily and never imports task suites.
"""

from __future__ import annotations

from typing import Any

from pytest_ecdysis.core.errors import UsageError


def owns(position: int, worker: int, workers: int) -> bool:
    """True when the case at `position` of the collection (0-based) is in the share of `worker` (0-based)
    among `workers` (>= 1)."""
    return position % max(workers, 1) == worker


def worker_slot(config: Any) -> tuple[int, int]:
    """(worker index, number of workers) of this process: `(0, 1)` without xdist, else from xdist's
    `workerinput` (`workerid` `gw<k>`, `workercount`)."""
    info = getattr(config, "workerinput", None)
    if info is None:
        return 0, 1
    return _index(info["workerid"]), int(info["workercount"])


def own_positions(count: int, config: Any) -> list[int]:
    """Positions, in collection order, of the cases among `count` collected that this process runs."""
    worker, workers = worker_slot(config)
    return [i for i in range(count) if owns(i, worker, workers)]


def check_dist(config: Any, concurrency: int, given: str | None = None) -> None:
    """Configure-time check: C > 1 needs xdist's `--dist load` (the default of `-n N`) or no xdist.

    Raises:
        UsageError: another `--dist` mode, whose own schedule would hand a worker cases it cannot foresee
            (`given`: the option's value as said, `auto`; default the number).
    """
    dist = getattr(config.option, "dist", "no")
    if concurrency > 1 and dist not in ("no", "load"):
        raise UsageError(
            f"--ecdysis-concurrency {given or concurrency} needs xdist's --dist load (the default of -n N), "
            f"got --dist {dist}; drop --dist, or use --ecdysis-concurrency 1"
        )


def _index(workerid: str) -> int:
    return int(workerid[2:]) if workerid.startswith("gw") and workerid[2:].isdigit() else 0


def make_scheduler(config: Any, log: Any) -> Any:
    """A `FixedShareScheduling` for xdist (the caller checks that C > 1 and `--dist load`)."""
    # pytest-xdist ships no type information (no py.typed): its scheduler is Any to mypy
    from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]

    class FixedShareScheduling(LoadScheduling):
        """`LoadScheduling` whose first distribution sends every worker its whole share (`owns`) and
        shuts it down after; a crashed worker's cases go to the others as in `LoadScheduling`."""

        collection: list[str] | None  #: the node ids every worker collected (None before they agree)

        def schedule(self) -> None:
            if self.collection is not None or not self._check_nodes_have_same_collection():
                return super().schedule()
            collection: list[str] = next(iter(self.node2collection.values()))
            self.collection = collection
            self.pending[:] = []
            nodes, workers = self.nodes, self.numnodes
            shares: dict[Any, list[int]] = {node: [] for node in nodes}
            by_index = {_index(node.gateway.id): node for node in nodes}
            for i in range(len(collection)):
                # a worker that did not come up: its share goes round the others (run, not started early)
                node = by_index.get(i % workers) or nodes[i % len(nodes)]
                shares[node].append(i)
            for node, share in shares.items():
                if share:
                    self.node2pending[node].extend(share)
                    node.send_runtest_some(share)
                node.shutdown()
            return None

    return FixedShareScheduling(config, log)
