"""The harness's view of the checkout holds only its tracked files (validate.integrity.pristine_copy): an
untracked data file in the checkout (a τ² copy with its gold tasks, left there or planted) never reaches the
private copy that validation sub-runs, and so harness code, read. Before, the copy took tracked and untracked
files, and a harness that read such a file went 0.250 -> 1.000 on 4 tasks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pytest_ecdysis.git.env import child_env
from pytest_ecdysis.validate import integrity


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=child_env(), check=True, capture_output=True)


def test_an_untracked_data_file_never_reaches_the_private_copy(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    (root / "harness").mkdir(parents=True)
    (root / "harness" / "__init__.py").write_text("def build_agent(): ...\n")
    (root / "test_suite.py").write_text("S = 1\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=d", "-c", "user.email=d@x", "commit", "-qm", "init")
    data = root / "harness" / "data" / "airline" / "tasks.json"  # inside the harness directory, even
    data.parent.mkdir(parents=True)
    data.write_text('[{"id": "0", "evaluation_criteria": {"actions": []}}]')
    (root / "tau2_copy.json").write_text("{}")
    (root / "staged.py").write_text("T = 1\n")
    git(root, "add", "staged.py")  # in the index: tracked
    copy = integrity.pristine_copy(root)
    try:
        files = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    assert files == ["harness/__init__.py", "staged.py", "test_suite.py"]
    # the integrity check still covers the untracked files (a change to one is still seen)
    assert "tau2_copy.json" in integrity.checkout_files(root)
