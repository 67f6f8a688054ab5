"""Client side of the simulated model: fetch a trial's ground truth, append it to the run directory.

`write_ground_truth` is called by the suite on xdist workers, several processes at once: each line is
appended under an exclusive `fcntl.flock` on a lock file beside `ground_truth.jsonl`, so lines never
interleave. Only the suite and the calibration scripts read the ground truth; no prompt, harness or
diagnosis may (docs/simulated-model.md).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pytest_ecdysis.core.errors import InfrastructureError
from pytest_ecdysis.endpoint.deadline import network_transport

GROUND_TRUTH_FILE = "sim/ground_truth.jsonl"
#: Request header carrying the ground-truth credential (the server checks it, `sim.server`); the env variable
#: the controller passes the credential in.
TOKEN_HEADER = "X-Ecdysis-Ground-Truth-Token"
ENV_TOKEN = "ECDYSIS_SIM_TOKEN"
_TOKENS: dict[str, str] = {}  # server url (no /v1) -> its token, for servers started in this process


def remember_token(url: str, token: str) -> None:
    """Record the ground-truth credential of a server started in this process (`SimServerHandle`)."""
    _TOKENS[url.rstrip("/").removesuffix("/v1")] = token


def ground_truth_headers(sim_url: str, token: str | None = None) -> dict[str, str]:
    """The header that authorises a ground-truth request to `sim_url`: `token`, else the token of a server
    this process started, else env `ECDYSIS_SIM_TOKEN` (the controller's, on workers); {} when none."""
    token = token or _TOKENS.get(sim_url.rstrip("/").removesuffix("/v1")) or os.environ.get(ENV_TOKEN)
    return {TOKEN_HEADER: token} if token else {}


def ground_truth_path(run_path: str | Path) -> Path:
    """`<run_path>/sim/ground_truth.jsonl`."""
    return Path(run_path) / GROUND_TRUTH_FILE


def write_ground_truth(run_path: str | Path, line: dict[str, Any]) -> Path:
    """Append one JSON line (`task_id`, `trial`, `failed`, `quirks`, ...) to the run's ground-truth file.

    Safe across processes (an exclusive lock on `ground_truth.jsonl.lock`). Returns the file's path.
    Raises `TypeError` when `line` is not JSON-serialisable (nothing is written then).
    """
    path = ground_truth_path(run_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(line, sort_keys=True) + "\n"
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path, "a", encoding="utf-8") as out:
                out.write(data)
                out.flush()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def read_ground_truth(run_path: str | Path) -> list[dict[str, Any]]:
    """Every line of the run's ground-truth file (empty when there is none)."""
    path = ground_truth_path(run_path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def fetch_ground_truth(
    sim_url: str,
    trial_header: str,
    timeout_s: float = 10.0,
    token: str | None = None,
    executed: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """GET `<sim_url>/ecdysis/ground_truth?trial=<trial_header>` (sim_url without `/v1`), with the server's
    credential (`ground_truth_headers`). With `executed` (the tool calls the environment ran, `[{"id", "name",
    "arguments"}]`, see `sim.truth.repairs.executed_calls`) it POSTs them instead, and the entries the harness
    repaired or refused in code come back marked (`sim/truth/repairs.py`).

    Raises:
        InfrastructureError: the server is unreachable or answers with an error (its message included).
    """
    import httpx2

    url = sim_url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    headers = ground_truth_headers(url, token)
    try:
        # the process's one TLS context (`network_transport`): `httpx2.get` builds one a call, 56 ms of CPU
        with httpx2.Client(transport=network_transport(), timeout=timeout_s) as client:
            if executed is None:
                response = client.get(
                    f"{url}/ecdysis/ground_truth?trial={quote(trial_header, safe='')}", headers=headers
                )
            else:
                response = client.post(
                    f"{url}/ecdysis/ground_truth",
                    headers=headers,
                    json={"trial": trial_header, "executed": executed},
                )
    except httpx2.HTTPError as exc:
        raise InfrastructureError(
            f"simulated model at {sim_url} unreachable for ground truth: {exc}"
        ) from exc
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:200]
        raise InfrastructureError(
            f"simulated model ground truth for {trial_header!r}: HTTP {response.status_code}: {message}"
        )
    return response.json()
