"""Progress a person can follow: what is running, done/total trials, elapsed time and an estimate.

- `TrialCounter`: the controller's count of finished trial cases, fed from test reports; it writes
  `<run>/progress.json` (`{"done", "total", "failed", "elapsed_s"}`, at most once a second) so that a
  parent process (the evolution loop waiting on a validation sub-run) can show the sub-run's progress.
- `Ticker`: while a stage runs, one line every `interval_s` seconds (ini `ecdysis_progress`, default 20),
  from a daemon thread: `<label>: 12/30 trials (3 below λ), 1m05s elapsed, about 1m40s left`. When the
  output is a terminal, a `rich` status line that redraws in place replaces the repeated lines; the stage's
  start and end lines are printed either way.
- `SessionProgress`: the session's own trials (`running the suite: ...`), fed by the plugin's hooks.

The estimate is the pace so far (elapsed / done x left); before the first trial finishes, the pace of a
comparable earlier run when one is given (`seconds_per_trial`), else none. No pytest, no tau2 here.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.records import SCHEMA_VERSION

#: ini `ecdysis_progress` default: seconds between progress lines (under the 30 s a reader waits for one).
INTERVAL_S = 20.0
#: least seconds between two writes of `progress.json`.
WRITE_EVERY_S = 1.0


@dataclass(frozen=True)
class Count:
    """Finished trial cases of a run: `done` of `total` (None when not known yet), `failed` of them."""

    done: int
    total: int | None
    failed: int = 0
    pace_s: float | None = None  # seconds the `done` trials took since collection (workers starting excluded)


def duration(seconds: float) -> str:
    """`45s`, `3m05s`, `1h02m`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def status_line(
    label: str, count: Count | None, elapsed_s: float, seconds_per_trial: float | None = None
) -> str:
    """The progress text of a stage (see the module docstring)."""
    parts = [f"{label}:"]
    left = None
    failed = f" ({count.failed} failed)" if count is not None and count.failed else ""
    if count is not None and not count.total and count.done:
        parts.append(f"{count.done} trials done{failed},")
    if count is not None and count.total:
        parts.append(f"{count.done}/{count.total} trials{failed},")
        todo = max(count.total - count.done, 0)
        if count.done:
            left = (count.pace_s or elapsed_s) / count.done * todo
        elif seconds_per_trial:
            left = max(seconds_per_trial * count.total - elapsed_s, 0.0)
    parts.append(f"{duration(elapsed_s)} elapsed")
    if left is not None:
        parts[-1] += f", about {duration(left)} left"
    elif count is not None and count.total:
        parts[-1] += ", estimate after the first trial"
    return " ".join(parts)


def read_count(path: Path) -> Count | None:
    """The count a run wrote to its `progress.json`, or None while there is none (or it is being replaced)."""
    try:
        data = json.loads(path.read_text())
        return Count(
            done=int(data["done"]),
            total=data.get("total"),
            failed=int(data.get("failed", 0)),
            pace_s=data.get("trials_elapsed_s"),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


class TrialCounter:
    """Counts finished trial cases on the controller and mirrors the count to `progress.json`."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.started = time.monotonic()
        self.done = 0
        self.failed = 0
        self.total: int | None = None
        self.collected_at: float | None = None  # when the trials could start (collection finished)
        self._written = 0.0

    def finished(self, failed: bool) -> None:
        """One trial case ended (its teardown report arrived)."""
        self.done += 1
        self.failed += bool(failed)
        self.write()

    def pace(self) -> float | None:
        return None if self.collected_at is None else time.monotonic() - self.collected_at

    def count(self) -> Count:
        return Count(done=self.done, total=self.total, failed=self.failed, pace_s=self.pace())

    def write(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.path is None or (not force and now - self._written < WRITE_EVERY_S):
            return
        self._written = now
        doc = {
            "schema_version": SCHEMA_VERSION,
            "done": self.done,
            "total": self.total,
            "failed": self.failed,
            "elapsed_s": round(now - self.started, 1),
            "trials_elapsed_s": None if self.collected_at is None else round(now - self.collected_at, 1),
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc))
            tmp.replace(self.path)
        except OSError:  # progress is a courtesy: an unwritable run dir is reported at the end of the run
            self.path = None


def is_terminal(stream: Any = None) -> bool:
    """True when `stream` (default stdout) is an interactive terminal that can redraw a line."""
    stream = stream or sys.stdout
    try:
        return bool(stream.isatty()) and os.environ.get("TERM", "") != "dumb" and not os.environ.get("CI")
    except (AttributeError, ValueError):
        return False


class Ticker:
    """Reports a running stage until it ends: `with Ticker(say, label, count=..., interval_s=20): work()`.

    `say(text)` writes one permanent line (the caller's prefix and terminal); `count()` returns the current
    `Count` or None. `interval_s <= 0` turns the periodic lines off. With `live=True` (a terminal) a rich
    status line redraws in place instead of the periodic lines.
    """

    def __init__(
        self,
        say: Callable[[str], None],
        label: str,
        *,
        count: Callable[[], Count | None] | None = None,
        interval_s: float = INTERVAL_S,
        seconds_per_trial: float | None = None,
        live: bool = False,
        text: Callable[[float], str | None] | None = None,
    ) -> None:
        self.say = say
        self.text = text  # replaces the standard line; None from it: no line this time
        self.label = label
        self.count = count or (lambda: None)
        self.interval_s = interval_s
        self.seconds_per_trial = seconds_per_trial
        self.live = live and interval_s > 0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status: Any = None

    def line(self) -> str | None:
        elapsed = time.monotonic() - self.started
        if self.text is not None:
            return self.text(elapsed)
        return status_line(self.label, self.count(), elapsed, self.seconds_per_trial)

    def __enter__(self) -> Ticker:
        self.started = time.monotonic()
        if self.interval_s <= 0:
            return self
        if self.live:
            from rich.console import Console

            self._status = Console(file=sys.stdout).status(self.line() or self.label)
            self._status.start()
        self._thread = threading.Thread(target=self._run, name="ecdysis-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._status is not None:
            self._status.stop()

    def _run(self) -> None:
        wait = 1.0 if self.live else self.interval_s
        while not self._stop.wait(wait):
            try:
                text = self.line()
                if text is None:
                    continue
                if self._status is not None:
                    self._status.update(text)
                else:
                    self.say(text)
            except Exception:  # noqa: BLE001 - a progress line must never break the run it reports on
                return


class SessionProgress:
    """The controller's progress through its own trial cases; the plugin feeds it and runs its ticker."""

    def __init__(self, run_path: Path, interval_s: float = INTERVAL_S) -> None:
        self.counter = TrialCounter(run_path / "progress.json")
        self.interval_s = interval_s
        self._failed: set[str] = set()
        self._guess: int | None = None
        self._collected = False
        #: what the session's limiter says (`endpoint.limiter.status_text`), appended to the line; None: nothing
        self.extra: Callable[[], str | None] = lambda: None

    def collected(self, total: int | None, guess: int | None = None) -> None:
        """The number of trial cases that will run, once known. Under xdist, for a suite that does not tell
        which node ids are trials, `guess` (every collected id) is used once a trial case has finished."""
        self._guess = guess
        self._collected = True
        if self.counter.collected_at is None:
            self.counter.collected_at = time.monotonic()
        if total:
            self.counter.total = total  # written with the first finished trial: a refused run writes nothing

    def report(self, report: Any) -> None:
        """A test report: a trial case is done at its teardown, failed when its setup or call failed."""
        if "ecdysis_trial" not in (getattr(report, "keywords", None) or {}):
            return
        if report.failed and report.when in ("setup", "call"):
            self._failed.add(report.nodeid)
        elif report.when == "teardown":
            self.counter.finished(report.nodeid in self._failed)

    def count(self) -> Count | None:
        """None until there is something to show (a session of ordinary tests shows nothing)."""
        if not self.counter.total and self.counter.done and self._guess:
            self.counter.total = max(self._guess, self.counter.done)
        c = self.counter.count()
        return c if c.total or c.done else None

    def close(self) -> None:
        """The final count to `progress.json` (writes are throttled while trials run)."""
        if self.counter.done:
            self.counter.write(force=True)

    def text(self, elapsed_s: float) -> str | None:
        """The session's line: its trials once known; while xdist workers start and collect, that; nothing
        for a session of ordinary tests."""
        count = self.count()
        if count is not None:
            line = status_line("running the suite", count, elapsed_s)
            extra = self.extra()
            return f"{line}; {extra}" if extra else line
        if not self._collected:
            return (
                f"running the suite: starting workers and collecting the tests, {duration(elapsed_s)} elapsed"
            )
        return None

    def ticker(self, say: Callable[[str], None]) -> Ticker:
        return Ticker(say, "running the suite", count=self.count, interval_s=self.interval_s, text=self.text)
