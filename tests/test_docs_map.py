"""The map is true: every module a docstring, comment or doc names exists, and no text cites our tracker.

What is read: every `.py` file of `pytest_ecdysis/`, `pytest_ecdysis_tau2/` and `benchmarks/`, and the
Markdown of `docs/`, `README.md`, `CONTRIBUTING.md` and `pytest_ecdysis_tau2/README.md`. What counts as a
module name there:

- a full dotted name (`pytest_ecdysis.evolve.loop.Evolution`): its longest prefix that is a module or package
  must be followed by nothing or by a name that module defines at its top level;
- a dotted name in backticks that starts with one of the packages' rooms (`evolve.loop`, `sim.agent.X`,
  `trial.runner`): the same, for the modules whose dotted path ends that way;
- a path to a `.py` or `.md` file (`evolve/loop.py`, `docs/records.md`): some file of the repository ends
  with it, unless it is one of the outside files listed in `EXTERNAL_FILES` (τ²'s, pytest-xdist's, a
  user's own);
- a name in backticks that was a module of this repository once (a file git shows renamed or deleted) and
  is no module, top-level definition or option now: the name of a module that moved (`evolve_stages`).

Users have no access to our tracker, so "issue N" appears nowhere they read: not in the texts above, nor in
any file of `tests/`, `benchmarks/`, `scripts/`, `.github/` or `.ci/` (a test says what it checks and why).
A public project's tracker may be cited: `τ² #298`, or the project's name right before the word
("LiteLLM issues 7259", "OpenHands issue 5350", `PUBLIC_TRACKERS`).
"""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pytest_ecdysis", "pytest_ecdysis_tau2")

#: Files of other projects (and of a user's repository) that our texts cite on purpose.
EXTERNAL_FILES = {
    "conftest.py",
    "setup.py",
    "__init__.py",
    "__main__.py",
    "dsession.py",
    "newhooks.py",
    "workermanage.py",
    "mockllm.py",
    "mock.py",
    "_exceptions.py",
    "STYLE.md",
    "DESIGN.md",
    "CHANGELOG.md",
    "model_prices_and_context_window_backup.json",
    "AGENTS.md",
    "CLAUDE.md",
    "sitecustomize.py",
    "usercustomize.py",
    "evaluator_communicate.py",
    "simulation_guidelines.md",
    "test_orders.py",
    "utils.py",
    "model_call.py",
    "t.py",
    "ecdysis-pr-body.md",
}
#: Prefixes of paths that live outside this repository (τ²'s package, a user's run, a temporary tree).
#: Dotted names in backticks that start like a room but are not ours (git configuration keys, pytest's).
EXTERNAL_NAMES = {
    "core.fsmonitor",
    "core.hooksPath",
    "core.sshCommand",
    "core.editor",
    "core.pager",
    "report.longrepr",
    "report.ecdysis_trial",
    "report.user_properties",
    "config.workeroutput",
    "gate.cost",  # a key of summary.json (docs/ci.md), not the module gate/cost_rise.py
}
#: A backticked name ending like a file (`edit.json`, `ci.yml`) is a file name, not a module.
FILE_SUFFIXES = (
    ".json",
    ".jsonl",
    ".yml",
    ".yaml",
    ".md",
    ".py",
    ".txt",
    ".html",
    ".toml",
    ".j2",
    ".tmpl",
    ".diff",
    ".patch",
    ".xml",
    ".sh",
    ".lock",
    ".gguf",
    ".csv",
)
EXTERNAL_PREFIXES = (
    "tau2/",
    "src/",
    "data/",
    "site-packages/",
    "xdist/",
    "/",
    "~",
    ".venv/",
    ".ecdysis/",
    "your_",
    "my_",
    "path/",
    "a/",
    "b/",
    ".../",
    "harness/",
    "tests/fixtures/",
    "web/",
    "tests/test_airline.py",  # the suite file `ecdysis init` writes into a user's repository (docs/ci.md)
)

DOTTED_FULL = re.compile(r"\b(pytest_ecdysis(?:_tau2)?(?:\.[A-Za-z_]\w*)+)")
BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*)`?")
FILE_PATH = re.compile(r"(?<![\w./~-])((?:[\w.-]+/)*[\w-]+\.(?:py|md))\b")
#: "issue", "Issue" or "issues" and a number (`#` before it or not), with the word before it (a name or not).
TRACKER = re.compile(r"(?:(\S+)\s+)?\b[Ii]ssues? #?\d+\b")
#: Public projects whose trackers a text may cite by number, named right before "issue".
PUBLIC_TRACKERS = frozenset({"LiteLLM", "OpenHands", "vLLM", "τ²", "tau2-bench", "pytest", "pytest-xdist"})
#: Folders whose every tracked text file the tracker rule reads too (data and fixtures included).
TRACKER_FOLDERS = ("tests", "benchmarks", "scripts", ".github", ".ci")
#: Text that looks like a citation but is data: (file, the exact text). A canary's seed is hashed, so its
#: bytes are the canary's value (tests/adversarial/test_sandbox_attacks.py).
NOT_CITATIONS = {("tests/adversarial/test_sandbox_attacks.py", 'b"issue ' + '27"')}


def _texts() -> list[Path]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    files += sorted((ROOT / "benchmarks").glob("*.py"))
    files += sorted((ROOT / "docs").glob("*.md"))
    files += [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "pytest_ecdysis_tau2/README.md")]
    return [p for p in files if p.is_file() and "__pycache__" not in p.parts]


@cache
def _modules() -> dict[str, Path]:
    """Dotted module name -> its file (a package's `__init__.py`)."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


@cache
def _defined(path: Path) -> frozenset[str]:
    """Top-level names a module defines (functions, classes, assignments, imports, `__all__`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _resolves(candidates: list[str], rest: list[str]) -> bool:
    """One of `candidates` (dotted module names) is followed by nothing or by a name it defines."""
    mods = _modules()
    for name in candidates:
        if name not in mods:
            continue
        if not rest:
            return True
        path = mods[name]
        sub = f"{name}.{rest[0]}"
        if sub in mods or rest[0] in _defined(path):
            return True
    return False


def _full_name_ok(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in _modules():
            return _resolves([head], parts[cut:])
    return False


@cache
def _rooms() -> frozenset[str]:
    """The sub-package names of both packages (`evolve`, `sim`, `scoring`, ...)."""
    return frozenset(
        m.split(".")[1]
        for m in _modules()
        if m.count(".") >= 1 and (_modules()[m].name == "__init__.py" and m.count(".") == 1)
    )


def _relative_name_ok(dotted: str) -> bool:
    parts = dotted.split(".")
    mods = _modules()
    for cut in range(len(parts), 0, -1):
        tail = ".".join(parts[:cut])
        hits = [m for m in mods if m == tail or m.endswith("." + tail)]
        if hits:
            return _resolves(hits, parts[cut:])
    return False


@cache
def _repo_files() -> tuple[str, ...]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return tuple(line for line in out.splitlines() if line)


def _path_ok(path: str, source: Path) -> bool:
    if path.startswith(EXTERNAL_PREFIXES) or Path(path).name in EXTERNAL_FILES:
        return True
    if (source.parent / path).exists():
        return True
    return any(f == path or f.endswith("/" + path) for f in _repo_files())


@cache
def _former_modules() -> frozenset[str]:
    """Stems of `.py` files git shows renamed away or deleted, that are no module, definition or option now."""
    try:
        log = subprocess.run(
            ["git", "log", "-M", "--name-status", "--diff-filter=RD", "--pretty=format:"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    gone = {
        Path(line.split("\t")[1]).stem
        for line in log.splitlines()
        if line[:1] in "RD" and "\t" in line and line.split("\t")[1].endswith(".py")
    }
    now = {m.rsplit(".", 1)[-1] for m in _modules()}
    for path in _modules().values():
        now |= _defined(path)
    options = (ROOT / "pytest_ecdysis" / "core" / "options.py").read_text(encoding="utf-8")
    return frozenset(n for n in gone - now if n.replace("_", "-") not in options and n not in options)


def stale_names(path: Path, text: str) -> list[str]:
    """The stale module names of one text, as `<file>:<line>: <name>`."""
    found: list[str] = []
    rooms, former = _rooms(), _former_modules()
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{path.relative_to(ROOT)}:{lineno}"
        for m in DOTTED_FULL.finditer(line):
            if not _full_name_ok(m.group(1)):
                found.append(f"{where}: {m.group(1)}")
        for m in BACKTICKED.finditer(line):
            name = m.group(1).rstrip(".")
            first = name.split(".")[0]
            if first in PACKAGES or name in EXTERNAL_NAMES or name.endswith(FILE_SUFFIXES):
                continue  # checked above, or not a module
            if first.startswith("__"):
                continue
            if "." in name and first in rooms and not _relative_name_ok(name):
                found.append(f"{where}: {name}")
            elif first in former:
                found.append(f"{where}: {name} (a module that no longer exists)")
        for m in FILE_PATH.finditer(line):
            if not _path_ok(m.group(1), path):
                found.append(f"{where}: {m.group(1)}")
    return found


def test_every_module_a_text_names_exists() -> None:
    """Docstrings, comments and docs name only modules (and their top-level names) that exist."""
    stale = [hit for path in _texts() for hit in stale_names(path, path.read_text(encoding="utf-8"))]
    assert not stale, f"{len(stale)} stale module names:\n" + "\n".join(stale)


def _tracker_texts() -> list[Path]:
    """`_texts()` and every tracked or new file of `TRACKER_FOLDERS` (binary files left out when read)."""
    folders = tuple(f"{folder}/" for folder in TRACKER_FOLDERS)
    return _texts() + [ROOT / f for f in _repo_files() if f.startswith(folders) and (ROOT / f).is_file()]


def tracker_citations(relative: str, text: str) -> list[str]:
    """The lines of one text that cite our tracker, as `<file>:<line>: <line's start>`."""
    hits = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for where, data in NOT_CITATIONS:
            if where == relative:
                line = line.replace(data, "")
        for m in TRACKER.finditer(line):
            before = (m.group(1) or "").removesuffix("'s").strip("(\"'`,;")
            if before not in PUBLIC_TRACKERS:
                hits.append(f"{relative}:{lineno}: {line.strip()[:100]}")
                break
    return hits


def test_no_text_cites_our_tracker() -> None:
    """No "issue N" in the package, the docs, the README, the tests, the benchmarks or the scripts: they say
    what and why, not which ticket asked."""
    hits = []
    for path in _tracker_texts():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file
        hits += tracker_citations(str(path.relative_to(ROOT)), text)
    assert not hits, f"{len(hits)} lines cite the tracker:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "text, cites",
    [
        ("fixed in issue " + "27, items 1, 2", True),
        ("Issue " + "30, item 2: the model reads", True),
        ("(issue " + "#8)", True),
        ("issue " + "13's routes", True),
        ("quoted in LiteLLM issues " + "7259 and 4988 and OpenHands issue " + "5350", False),
        ("vLLM issues " + "4667, 20409", False),
        ("τ² #298, pytest-xdist 814", False),
        ("an issue with the endpoint", False),
    ],
)
def test_the_tracker_check_itself(text: str, cites: bool) -> None:
    """The tracker rule flags our numbered issues and passes public projects' and prose."""
    assert bool(tracker_citations("tests/x.py", text)) is cites


def test_a_canary_seed_is_data_only_where_named() -> None:
    """The canary's seed passes in its own file and nowhere else."""
    (where, data) = next(iter(NOT_CITATIONS))
    line = f"CANARY = hashlib.sha256({data}).hexdigest()"
    assert tracker_citations(where, line) == []
    assert tracker_citations("tests/other.py", line) != []


@pytest.mark.parametrize(
    "text, stale",
    [
        ("see `evolve.loop.Evolution`", False),
        ("see `evolve.loop.NoSuchThing`", True),
        ("see pytest_ecdysis.evolve.no_such_module", True),
        ("see pytest_ecdysis/evolve/no_such_module.py", True),
        ("see evolve/loop.py", False),
    ],
)
def test_the_check_itself(text: str, stale: bool) -> None:
    """The check finds a deliberately stale name and passes a true one."""
    assert bool(stale_names(ROOT / "README.md", text)) is stale
