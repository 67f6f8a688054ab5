"""The action's sandbox on GitHub's runners (scripts/sandbox-setup.sh, action.yml, `ci.action`): ubuntu-latest
restricts unprivileged user namespaces through AppArmor, and bwrap run by the non-root runner user fails with
`setting up uid map: Permission denied`. The set-up script probes bwrap, applies the documented remedy with
sudo (an AppArmor profile for bwrap, else the sysctl) and says what it did; where nothing helps, evolve mode
(`ECDYSIS_SANDBOX_REQUIRED=1`) fails the step with one line naming the cause and the remedy. Tested with a
fake `bwrap` that fails as AppArmor makes it fail, and fake `sudo`, `sysctl` and `apparmor_parser`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_ecdysis.ci.action import pytest_args
from pytest_ecdysis.ci.inputs import ActionInputs
from pytest_ecdysis.core.errors import ActionInputError

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sandbox-setup.sh"

FAKES = {
    # fails as on an AppArmor-restricted runner until a remedy was applied (the file `lifted` exists)
    "bwrap": '#!/bin/sh\n[ -f "$STATE/lifted" ] && exit 0\necho "bwrap: setting up uid map: Permission denied" >&2\n'
    "exit 1\n",
    "sudo": '#!/bin/sh\necho "sudo $*" >> "$STATE/sudo.log"\nexec "$@"\n',
    "sysctl": '#!/bin/sh\nif [ "$1" = -n ]; then [ -f "$STATE/lifted" ] && echo 0 || echo 1; exit 0; fi\n'
    'case "$2" in kernel.apparmor_restrict_unprivileged_userns=0) [ "$SYSCTL_WORKS" = 1 ] && touch "$STATE/lifted"'
    " && exit 0; exit 1;; esac\nexit 1\n",
    "apparmor_parser": '#!/bin/sh\n[ "$PROFILE_WORKS" = 1 ] && grep -q userns "$2" && touch "$STATE/lifted" && exit 0\n'
    "exit 1\n",
}


def run_setup(tmp_path: Path, *, profile: bool, sysctl: bool, required: bool) -> subprocess.CompletedProcess:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in FAKES.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "STATE": str(state),
        "SUDO": "sudo",  # the runner user is not root
        "BWRAP_PROFILE": str(tmp_path / "apparmor.d-bwrap"),
        "PROFILE_WORKS": "1" if profile else "0",
        "SYSCTL_WORKS": "1" if sysctl else "0",
        "ECDYSIS_SANDBOX_REQUIRED": "1" if required else "0",
    }
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_the_apparmor_profile_remedy_is_applied_with_sudo_and_said(tmp_path: Path) -> None:
    proc = run_setup(tmp_path, profile=True, sysctl=False, required=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "loaded an AppArmor profile allowing them for" in proc.stdout
    assert proc.stdout.strip().endswith("sandbox: bubblewrap starts here")
    profile = (tmp_path / "apparmor.d-bwrap").read_text()
    assert "userns," in profile and f"profile bwrap {tmp_path / 'bin' / 'bwrap'}" in profile
    log = (tmp_path / "state" / "sudo.log").read_text()
    assert "sudo tee" in log and "sudo apparmor_parser -r" in log


def test_the_sysctl_remedy_when_the_profile_does_not_help(tmp_path: Path) -> None:
    proc = run_setup(tmp_path, profile=False, sysctl=True, required=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "set kernel.apparmor_restrict_unprivileged_userns=0 (sudo sysctl)" in proc.stdout
    assert (
        "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
        in (tmp_path / "state" / "sudo.log").read_text()
    )


@pytest.mark.parametrize("required", [True, False], ids=["evolve", "gate"])
def test_no_remedy_fails_evolve_with_one_line_naming_cause_and_remedy(tmp_path: Path, required: bool) -> None:
    proc = run_setup(tmp_path, profile=False, sysctl=False, required=required)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("::")]
    assert len(lines) == 1, proc.stdout
    assert "setting up uid map: Permission denied" in lines[0] and "remedy:" in lines[0]
    if required:
        assert proc.returncode == 1 and lines[0].startswith("::error::")
    else:
        assert proc.returncode == 0 and lines[0].startswith("::notice::") and "runs without it" in lines[0]


def inputs(**extra: str) -> ActionInputs:
    return ActionInputs.from_env({"INPUT_MODE": "evolve", "INPUT_TOKEN": "t", **extra})


def test_evolve_runs_with_the_sandbox_on_unless_the_workflow_opts_out_by_name() -> None:
    args = pytest_args(inputs(), "sim")
    assert args[args.index("--ecdysis-sandbox") + 1] == "on"
    for mode in ("auto", "off"):
        args = pytest_args(inputs(INPUT_SANDBOX=mode), "sim")
        assert args[args.index("--ecdysis-sandbox") + 1] == mode
    gate = ActionInputs.from_env({"INPUT_MODE": "baseline"})
    assert "--ecdysis-sandbox" not in pytest_args(gate, "sim")  # the plugin's default, auto
    with pytest.raises(ActionInputError, match="set `sandbox:` to one of on, auto, off"):
        inputs(INPUT_SANDBOX="maybe")


def test_the_action_runs_the_set_up_and_requires_it_in_evolve_mode() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML is in the dev extra")
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    steps = action["runs"]["steps"]
    setup = next(s for s in steps if "sandbox-setup.sh" in s.get("run", ""))
    run = next(s for s in steps if s.get("id") == "run")
    assert steps.index(setup) < steps.index(run)
    assert "inputs.mode == 'evolve'" in setup["env"]["ECDYSIS_SANDBOX_REQUIRED"]
    assert run["env"]["INPUT_SANDBOX"] == "${{ inputs.sandbox }}"
    assert os.access(SCRIPT, os.X_OK)
