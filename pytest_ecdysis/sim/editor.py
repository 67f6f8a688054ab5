"""The simulated model's editor: turns a modification spec into real source edits through edit recipes.

Recipes live beside the harness, in `<harness_dir>/recipes/*.toml` (data for this editor, never imported
by the harness at runtime). One recipe per *knob* (docs/internals.md, "Spec parameters"); a spec change
names its knob in `parameters["knob"]` and gives the recipe's parameters (`value`, `rules`, `text`).
A change whose knob has no recipe, whose parameters do not fit the recipe, whose recipe does not apply
to the harness's source, or whose trigger the recipe cannot implement (neither one of its `triggers` nor
a `narrowing` it has) is reported as *not implementable*, with the reason: nothing is guessed. A spec
narrowed by review (a narrower trigger, a guard) gets the recipe's narrower edit.

Recipe format (TOML)::

    knob = "max_model_calls"
    file = "config.py"                      # relative to the harness directory
    description = "..."
    triggers = ["..."]                      # optional: the triggers the base steps implement (phrases)
    [[narrowing]]                           # optional: a narrower edit for a spec whose trigger or guards
    when = "after at least one write"       #   contain this phrase; its steps run after the base steps
    steps = [{op = "...", ...}]
    [parameters]                            # name -> type: "int", "str", "list[str]"
    value = "int"
    [[steps]]                               # applied in order (a step may name another `file`)
    op = "set_constant"                     # see OPS at the end of this module
    name = "MAX_MODEL_CALLS"
    value = "${value}"

A recipe may create a layer the harness lacks (the Direct harness has none): a `create_file` step
(`template` = a file beside the recipe, its text written only when the file does not exist yet) followed
by the steps that fill it in and wire it into the harness's other files; recipes sharing a layer share its
template, so the one applied second finds the file and adds to it.

Templates use `string.Template` placeholders (`${value}`); a parameter is substituted as a Python
literal (`repr`), so a text rule becomes a quoted string, never code (`${raw_text}` is a str parameter's
bare text, for prose such as a prompt line). Operations work on the module's
AST positions, so comments and formatting elsewhere in the file survive.

This module never imports harness code; it only reads and writes its files.
"""

from __future__ import annotations

import ast
import json
import string
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

RECIPES_DIR = "recipes"
_TYPES: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str) and bool(v.strip()),
    "list[str]": lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v),
}


class RecipeError(Exception):
    """A recipe that cannot be applied to this harness (reported as not implementable)."""


@dataclass
class Recipe:
    knob: str
    file: str
    description: str
    parameters: dict[str, str]
    steps: list[dict[str, Any]]
    path: Path
    triggers: list[str] = field(default_factory=list)
    narrowing: list[dict[str, Any]] = field(default_factory=list)

    def steps_for(self, trigger: str, guards: list[str]) -> list[dict[str, Any]]:
        """The steps implementing `trigger` and `guards`: the base steps plus every narrowing whose phrase
        they contain.

        Raises:
            RecipeError: the recipe names its triggers, and `trigger` is none of them and no narrowing.
        """
        text = " ".join([trigger, *guards]).lower()
        chosen = [n for n in self.narrowing if str(n.get("when", "")).lower() in text]
        if self.triggers and trigger.strip() and not chosen \
                and not any(t.lower() in trigger.lower() for t in self.triggers):
            can = [repr(t) for t in self.triggers] + [f"narrowed: {n.get('when')!r}" for n in self.narrowing]
            raise RecipeError(f"recipe {self.knob!r} cannot implement the trigger {trigger!r}; it implements "
                              f"{' or '.join(can)}")
        return [*self.steps, *(step for n in chosen for step in n.get("steps", []))]


@dataclass
class SimEditResult:
    """What the sim editor did: knobs applied, changes it could not implement, files written."""

    applied: list[str] = field(default_factory=list)
    not_implementable: list[dict[str, str]] = field(default_factory=list)  # {"knob", "reason"}
    files: list[str] = field(default_factory=list)


def recipes_dir(harness_dir: Path) -> Path:
    return harness_dir / RECIPES_DIR


def has_recipes(harness_dir: Path) -> bool:
    d = recipes_dir(harness_dir)
    return d.is_dir() and any(d.glob("*.toml"))


def check_usable(harness_dir: Path) -> None:
    """`--ecdysis-editor sim` needs recipes beside the harness.

    Raises:
        UsageError: the harness ships no `recipes/*.toml`; names the other editors.
    """
    if not has_recipes(harness_dir):
        raise UsageError(
            f"--ecdysis-editor sim applies edit recipes shipped beside the harness, and {harness_dir} has no "
            f"{RECIPES_DIR}/*.toml; use --ecdysis-editor builtin (an LLM edit) or "
            "--ecdysis-editor 'cmd:<your coding agent> {spec} {harness}'"
        )


def load_recipes(harness_dir: Path) -> dict[str, Recipe]:
    """Every recipe of the harness, keyed by knob.

    Raises:
        UsageError: a recipe file that does not parse or two recipes for one knob.
    """
    recipes: dict[str, Recipe] = {}
    for path in sorted(recipes_dir(harness_dir).glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text())
            recipe = Recipe(knob=data["knob"], file=data["file"], description=data.get("description", ""),
                            parameters=dict(data.get("parameters", {})), steps=list(data["steps"]), path=path,
                            triggers=[str(t) for t in data.get("triggers", [])],
                            narrowing=[dict(n) for n in data.get("narrowing", [])])
        except (tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
            raise UsageError(f"edit recipe {path} is malformed ({exc}); fix or remove it") from None
        if recipe.knob in recipes:
            raise UsageError(f"two edit recipes for knob {recipe.knob!r}: {recipes[recipe.knob].path} and {path}")
        unknown = [t for t in recipe.parameters.values() if t not in _TYPES]
        if unknown:
            raise UsageError(f"edit recipe {path}: unknown parameter type(s) {unknown}; use {sorted(_TYPES)}")
        recipes[recipe.knob] = recipe
    return recipes


def apply_spec(spec: Any, harness_dir: Path) -> SimEditResult:
    """Apply each change of `spec` (a `ModificationSpec` or its dict) through its knob's recipe.

    Files are written in place under `harness_dir`. A change that cannot be implemented leaves the files
    as they were and is listed in `not_implementable`.
    """
    changes = spec.changes if hasattr(spec, "changes") else spec.get("changes", [])
    recipes = load_recipes(harness_dir)
    result = SimEditResult()
    for change in changes:
        params = dict(change.parameters if hasattr(change, "parameters") else change.get("parameters", {}))
        knob = params.pop("knob", None)
        if not knob:
            result.not_implementable.append({"knob": "", "reason": "the change names no knob in its parameters"})
            continue
        recipe = recipes.get(knob)
        if recipe is None:
            result.not_implementable.append({"knob": knob, "reason": f"no edit recipe for knob {knob!r}"})
            continue
        trigger = str(_field(change, "trigger") or "")
        guards = [str(g) for g in (_field(change, "guards") or [])]
        try:
            changed = apply_recipe(recipe, params, harness_dir, steps=recipe.steps_for(trigger, guards))
        except RecipeError as exc:
            result.not_implementable.append({"knob": knob, "reason": str(exc)})
            continue
        if changed:
            result.applied.append(knob)
            if recipe.file not in result.files:
                result.files.append(recipe.file)
        else:
            result.not_implementable.append({"knob": knob, "reason": "already in place: the recipe changes nothing"})
    return result


def _field(change: Any, name: str) -> Any:
    return getattr(change, name, None) if not isinstance(change, dict) else change.get(name)


def apply_recipe(recipe: Recipe, params: dict[str, Any], harness_dir: Path,
                 steps: list[dict[str, Any]] | None = None) -> bool:
    """Apply one recipe (its base `steps`, or the `steps` given: base plus narrowings); True when a file
    changed.

    Raises:
        RecipeError: parameters missing or of the wrong type, the target not found, or the result does not
            compile (the file is then left untouched).
    """
    for name, kind in recipe.parameters.items():
        if name not in params:
            raise RecipeError(f"recipe {recipe.knob!r} needs parameter {name!r} ({kind})")
        if not _TYPES[kind](params[name]):
            raise RecipeError(f"recipe {recipe.knob!r}: parameter {name!r} must be {kind}, got {params[name]!r}")
    literals = {k: _literal(v) for k, v in params.items() if k in recipe.parameters}
    literals.update({f"raw_{k}": str(v) for k, v in params.items() if recipe.parameters.get(k) == "str"})
    originals: dict[str, str] = {}
    sources: dict[str, str] = {}
    for step in recipe.steps if steps is None else steps:
        rel = step.get("file", recipe.file)
        if rel not in sources:
            path = harness_dir / rel
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise RecipeError(f"recipe {recipe.knob!r} names {rel}, outside the harness directory")
            if path.is_file():
                originals[rel] = sources[rel] = path.read_text()
            elif step.get("op") == "create_file":  # a layer the harness does not have yet
                originals[rel] = sources[rel] = ""
            else:
                raise RecipeError(f"recipe {recipe.knob!r} edits {rel}, which this harness does not have")
        op = OPS.get(step.get("op", ""))
        if op is None:
            raise RecipeError(f"recipe {recipe.knob!r}: unknown op {step.get('op')!r} (known: {sorted(OPS)})")
        if step.get("op") == "create_file":  # the new file's text: a template beside the recipe
            step = {**step, "text": _template(recipe, str(step.get("template", "")))}
        rendered = {k: _render(v, literals, recipe.knob) for k, v in step.items()
                    if k not in ("op", "file", "template")}
        sources[rel] = op(sources[rel], params=params, **rendered)
    for rel, source in sources.items():
        try:
            compile(source, rel, "exec")
        except SyntaxError as exc:
            raise RecipeError(f"recipe {recipe.knob!r} would leave {rel} with a syntax error: {exc}") from None
    changed = [rel for rel in sources if sources[rel] != originals[rel]]
    for rel in changed:
        (harness_dir / rel).write_text(sources[rel])
    return bool(changed)


def _template(recipe: Recipe, name: str) -> str:
    """The text of a `create_file` step's `template` (relative to the recipe's directory).

    Raises:
        RecipeError: no template named, or the file is missing.
    """
    path = recipe.path.parent / name
    if not name or not path.is_file():
        raise RecipeError(f"recipe {recipe.knob!r}: create_file needs a template file beside the recipe, "
                          f"got {name!r}")
    return path.read_text()


def _literal(value: Any) -> str:
    """A Python literal for a parameter, strings in double quotes (the harness's own style)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def _render(value: Any, literals: dict[str, str], knob: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return string.Template(value).substitute(literals)
    except (KeyError, ValueError) as exc:
        raise RecipeError(f"recipe {knob!r}: template refers to unknown parameter {exc}") from None


# --- operations -------------------------------------------------------------------------------------

def _top_level(source: str, name: str, kinds: tuple[type, ...]) -> ast.AST | None:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node if isinstance(node, kinds) else None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node if isinstance(node, kinds) else None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node if isinstance(node, kinds) else None
    return None


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """Character offset of (1-based line, UTF-8 byte column) in the joined source."""
    line = lines[lineno - 1]
    return sum(len(x) for x in lines[: lineno - 1]) + len(line.encode()[:col].decode())


def _replace_span(source: str, node: ast.AST, text: str) -> str:
    lines = source.splitlines(keepends=True)
    start = _offset(lines, node.lineno, node.col_offset)
    end = _offset(lines, node.end_lineno, node.end_col_offset)
    return source[:start] + text + source[end:]


def op_create_file(source: str, *, text: str, params: dict[str, Any]) -> str:
    """Create a file the harness does not have (a new layer module) from `text`; an existing file (another
    recipe created it, or the harness has it) is left as it is."""
    return source if source else text


def op_set_constant(source: str, *, name: str, value: str, params: dict[str, Any]) -> str:
    """Set the value of a top-level `NAME = ...` (the expression only; a trailing comment stays)."""
    node = _top_level(source, name, (ast.Assign, ast.AnnAssign))
    if node is None or node.value is None:
        raise RecipeError(f"no top-level assignment to {name}")
    return _replace_span(source, node.value, value)


def op_ensure_constant(source: str, *, name: str, value: str, after: str = "", comment: str = "",
                       params: dict[str, Any]) -> str:
    """Add `NAME = value` (preceded by `#: comment` lines) after the top-level definition `after` (or the
    imports) unless NAME exists."""
    if _top_level(source, name, (ast.Assign, ast.AnnAssign)) is not None:
        return source
    lines = "".join(f"#: {line}\n" for line in comment.strip().splitlines())
    return _insert_top_level(source, f"\n{lines}{name} = {value}\n", after)


def op_append_line(source: str, *, name: str, line: str, params: dict[str, Any]) -> str:
    """Append `line` to the top-level string constant `name` (a rule to a prompt), unless present."""
    node = _top_level(source, name, (ast.Assign, ast.AnnAssign))
    if node is None or not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
        raise RecipeError(f"no top-level string constant {name}")
    text = node.value.value
    if line.strip() in text:
        return source
    new = text.rstrip("\n") + "\n" + line.strip()
    segment = ast.get_source_segment(source, node.value) or ""
    if segment.startswith('"""') and '"""' not in new and "\\" not in new and not new.endswith('"'):
        literal = '"""\\\n' + new + '"""'
    else:
        literal = repr(new)
    return _replace_span(source, node.value, literal)


def op_replace_text(source: str, *, old: str, new: str, params: dict[str, Any]) -> str:
    """Replace `old` (which must occur exactly once) with `new`; nothing when `new` is already there."""
    if new in source:
        return source
    count = source.count(old)
    if count != 1:
        raise RecipeError(f"the text to replace occurs {count} times (it must occur exactly once): {old[:60]!r}")
    return source.replace(old, new)


def op_extend_sequence(source: str, *, name: str, items: str, params: dict[str, Any]) -> str:
    """Append to a top-level list/tuple literal `NAME` each item of `items` (a Python list literal) not
    already in it, one per line, keeping the literal's own layout."""
    node = _top_level(source, name, (ast.Assign, ast.AnnAssign))
    if node is None or not isinstance(node.value, (ast.List, ast.Tuple)):
        raise RecipeError(f"no top-level list or tuple literal {name}")
    try:
        current = [ast.literal_eval(e) for e in node.value.elts]
    except ValueError:
        raise RecipeError(f"{name} is not a literal sequence") from None
    new = [x for x in ast.literal_eval(items) if x not in current]
    if not new:
        return source
    seq = node.value
    if seq.lineno == seq.end_lineno:  # one-line literal: rewrite it as one item per line
        elements = [ast.get_source_segment(source, e) for e in seq.elts] + [_literal(x) for x in new]
        if isinstance(seq, ast.Tuple) and len(elements) == 1:
            elements[0] += ","
        opening, closing = ("(", ")") if isinstance(seq, ast.Tuple) else ("[", "]")
        body = "".join(f"    {e},\n" for e in elements)
        return _replace_span(source, seq, f"{opening}\n{body}{closing}")
    lines = source.splitlines(keepends=True)
    indent = "    "
    if seq.elts:
        first = lines[seq.elts[0].lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
    if seq.elts and not lines[seq.elts[-1].end_lineno - 1].rstrip().endswith(","):
        last = seq.elts[-1]
        row = lines[last.end_lineno - 1]
        cut = len(row.encode()[: last.end_col_offset].decode())
        lines[last.end_lineno - 1] = row[:cut] + "," + row[cut:]
    addition = "".join(f"{indent}{_literal(x)},\n" for x in new)
    lines.insert(seq.end_lineno - 1, addition)
    return "".join(lines)


def op_replace_function(source: str, *, name: str, code: str, params: dict[str, Any]) -> str:
    """Replace the top-level function `name` (decorators included) with `code`."""
    node = _top_level(source, name, (ast.FunctionDef,))
    if node is None:
        raise RecipeError(f"no top-level function {name}()")
    lines = source.splitlines(keepends=True)
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    replacement = code.rstrip("\n") + "\n"
    return "".join(lines[:start]) + replacement + "".join(lines[node.end_lineno:])


def op_add_function(source: str, *, name: str, code: str, after: str = "",
                    params: dict[str, Any]) -> str:
    """Add a top-level function after the definition `after` (or at the end), unless `name` exists."""
    if _top_level(source, name, (ast.FunctionDef,)) is not None:
        return source
    return _insert_top_level(source, "\n\n" + code.strip("\n") + "\n", after, at_end=not after)


def op_ensure_import(source: str, *, line: str, params: dict[str, Any]) -> str:
    """Add an import line after the last top-level import unless an identical line exists."""
    if any(x.strip() == line.strip() for x in source.splitlines()):
        return source
    tree = ast.parse(source)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    lines = source.splitlines(keepends=True)
    at = imports[-1].end_lineno if imports else _docstring_end(tree)
    lines.insert(at, line.strip() + "\n")
    return "".join(lines)


def _docstring_end(tree: ast.Module) -> int:
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno
    return 0


def _insert_top_level(source: str, text: str, after: str, at_end: bool = False) -> str:
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if at_end:
        return "".join(lines) + text
    if after:
        anchor = _top_level(source, after, (ast.AST,))
        if anchor is None:
            raise RecipeError(f"no top-level definition {after} to insert after")
        at = anchor.end_lineno
    else:
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        at = imports[-1].end_lineno if imports else _docstring_end(tree)
    lines.insert(at, text)
    return "".join(lines)


OPS: dict[str, Callable[..., str]] = {
    "create_file": op_create_file,
    "set_constant": op_set_constant,
    "ensure_constant": op_ensure_constant,
    "extend_sequence": op_extend_sequence,
    "replace_function": op_replace_function,
    "add_function": op_add_function,
    "ensure_import": op_ensure_import,
    "append_line": op_append_line,
    "replace_text": op_replace_text,
}
