"""Per-session state of a pytest session's run (`EcdysisState`, kept in `config.stash`) and the environment
variables the controller sets for its workers and sub-runs."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.config import EcdysisConfig

ENV_RUN_ID = "ECDYSIS_RUN_ID"
ENV_SIM_URL = "ECDYSIS_SIM_URL"
#: set by a controller beside the two above, for its own xdist workers: a controller that finds it set by
#: another process is a session nested in a running one (an editor's or a harness's pytest), not its worker
ENV_SESSION_PID = "ECDYSIS_SESSION_PID"


@dataclass
class EcdysisState:
    """Per-session state, kept in `config.stash` (never on `config._...`)."""

    cfg: EcdysisConfig
    harness_dir: Path
    harness_id: str
    run_id: str
    is_controller: bool
    sim_url: str | None = None
    sim_server: Any = None
    trials: dict[str, dict] = field(default_factory=dict)  # nodeid -> TrialResult JSON
    collected: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    outcome: Any = None  # set by session.finish: summary, gate verdict, evolution result
    messages: list[str] = field(default_factory=list)
    html_path: Path | None = None  # the page ini `ecdysis_html` wrote
    progress: Any = None  # progress.SessionProgress on the controller
    no_trials: bool = False  # --collect-only, --setup-plan, --fixtures, ...: no trial will run
    sandbox_verdict: str | None = None  # the verdict's line when harness code ran without the sandbox
    limiter: Any = (
        None  # endpoint.limiter_service.LimiterService this controller started (None: inherited, none)
    )
    coverage: Any = None  # run.coverage.Coverage: what was collected and reported (made on first use)

    @property
    def run_path(self) -> Path:
        return self.cfg.run_dir / self.run_id


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
