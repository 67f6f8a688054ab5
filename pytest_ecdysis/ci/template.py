"""`ecdysis init DIR`: the smallest repository that gates and evolves a harness of its own.

What it lays out (docs/ci.md, "A repository of your own"):

    harness/                             a copy of a harness to start from (default: the example harness,
                                         with its edit recipes, so the simulated editor can evolve it)
    tests/...                            the suite that runs it: the chosen suite's template (`--suite`,
                                         registered by the suite with the `ecdysis_templates` hook)
    pytest.ini                           testpaths, `ecdysis_harness = harness`, a fixed simulated-model nonce
    .gitignore, README.md
    .github/workflows/ecdysis-gate.yml   the gate on pull requests, with the action (`uses: OWNER/REPO@REF`)
    .github/workflows/ecdysis-evolve.yml evolution on demand, a pull request when a round was accepted
    .ecdysis/baseline.json               with `--baseline`: the suite run (GATE_TRIALS trials) and its scores saved

Template files end in `.tmpl` (dropped), a path part `dot_x` becomes `.x`, and `@ACTION@` becomes the
action's reference. Nothing is overwritten: an existing file is an error naming it, before anything is
written. This module never imports a suite: the suite's part comes from its registered directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.harness import harness_files, resolve_harness
from pytest_ecdysis.core.registry import registered_templates

GENERIC = Path(__file__).resolve().parent / "repo_template"
#: the action's reference the workflows use; pass `--action OWNER/REPO@REF` for your copy or a release.
ACTION_REF = "pytest-ecdysis/pytest-ecdysis@v0"
HARNESS_DIR = "harness"


def template_files(suite: str | None) -> dict[str, Path]:
    """`{path in the new repository: template file}`: the generic template with the suite's laid over it.

    Raises:
        UsageError: `suite` is not a registered template, or None while several (or none) are registered.
    """
    known = registered_templates()
    if suite is None:
        if len(known) != 1:
            raise UsageError(
                f"pass --suite NAME, one of: {', '.join(sorted(known)) or 'none installed'} "
                "(pip install 'pytest-ecdysis[tau2]' installs the tau2 suite)"
            )
        suite = next(iter(known))
    if suite not in known:
        raise UsageError(
            f"--suite {suite!r} offers no template; installed: {', '.join(sorted(known)) or 'none'}"
        )
    files: dict[str, Path] = {}
    for root in (GENERIC, Path(known[suite])):
        for path in sorted(root.rglob("*.tmpl")):
            rel = path.relative_to(root).with_suffix("")  # drops `.tmpl`
            files["/".join("." + p[4:] if p.startswith("dot_") else p for p in rel.parts)] = path
    return files


def init(
    target: Path,
    *,
    suite: str | None = None,
    harness: str = "example_harness",
    action: str | None = None,
    baseline: bool = False,
) -> list[str]:
    """Lay the template out in `target` (created if missing); returns the paths written, relative to it.

    Raises:
        UsageError: a file the template writes exists already (nothing is written then), an unknown suite or
            harness, or (with `baseline`) the suite run that makes the baseline failed.
    """
    source = resolve_harness(harness, Path.cwd())
    files = template_files(suite)
    harness_copy = {f"{HARNESS_DIR}/{rel.as_posix()}": source / rel for rel in harness_files(source)}
    existing = [rel for rel in [*files, *harness_copy] if (target / rel).exists()]
    if existing:
        raise UsageError(
            f"{target / existing[0]} exists ({len(existing)} of the template's files do): "
            "run `ecdysis init` on a new or empty directory"
        )
    for rel, path in files.items():
        out = target / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            path.read_text(encoding="utf-8").replace("@ACTION@", action or ACTION_REF), encoding="utf-8"
        )
    for rel, path in harness_copy.items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / rel)
    written = sorted([*files, *harness_copy])
    if baseline:
        written.append(save_baseline(target))
    return written


#: trials per task of the new repository's baseline and gate: what the non-inferiority gate needs on the τ²
#: suite (`noninferiority.plan_trials` on its train tasks' rates, docs/ci.md "The gate's rule"); the gate
#: workflow's `trials:` says the same.
GATE_TRIALS = 8


def save_baseline(target: Path, *args: str) -> str:
    """Run the new repository's suite (`pytest -n 2 --ecdysis-trials GATE_TRIALS`) and save its scores as
    `.ecdysis/baseline.json`.

    Raises:
        UsageError: the run wrote no baseline (its output is in the message's last lines).
    """
    rel = ".ecdysis/baseline.json"
    env = {k: v for k, v in os.environ.items() if k not in ("ECDYSIS_RUN_ID", "PYTEST_ADDOPTS")}
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-n", "2", "-q", "--ecdysis-trials", str(GATE_TRIALS)),
            *("--ecdysis-save-baseline", rel, *args),
        ],
        cwd=target,
        env=env,
        capture_output=True,
        text=True,
    )
    if not (target / rel).is_file():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise UsageError(
            f"the suite run in {target} wrote no baseline (exit status {proc.returncode}); fix what "
            f"it says and run `pytest --ecdysis-trials {GATE_TRIALS} --ecdysis-save-baseline {rel}` there:\n{tail}"
        )
    return rel
