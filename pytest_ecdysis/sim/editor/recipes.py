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
    op = "set_constant"                     # see OPS in sim/editor/ops.py
    name = "MAX_MODEL_CALLS"
    value = "${value}"

A recipe may create a layer the harness lacks (the Direct harness has none): a `create_file` step
(`template` = a file beside the recipe, its text written only when the file does not exist yet) followed
by the steps that fill it in and wire it into the harness's other files; recipes sharing a layer share its
template, so the one applied second finds the file and adds to it.

Templates use `string.Template` placeholders (`${value}`); a parameter is substituted as a Python
literal (`repr`), so a text rule becomes a quoted string, never code (`${raw_text}` is a str parameter's
bare text, for prose such as a prompt line). Operations (`sim.editor.ops`) work on the module's
AST positions, so comments and formatting elsewhere in the file survive.

This module never imports harness code; it only reads and writes its files.
"""

from __future__ import annotations

import string
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.sim.editor.ops import OPS, RecipeError, _literal

RECIPES_DIR = "recipes"
_TYPES: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str) and bool(v.strip()),
    "list[str]": lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v),
}


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
        if (
            self.triggers
            and trigger.strip()
            and not chosen
            and not any(t.lower() in trigger.lower() for t in self.triggers)
        ):
            can = [repr(t) for t in self.triggers] + [f"narrowed: {n.get('when')!r}" for n in self.narrowing]
            raise RecipeError(
                f"recipe {self.knob!r} cannot implement the trigger {trigger!r}; it implements "
                f"{' or '.join(can)}"
            )
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
            recipe = Recipe(
                knob=data["knob"],
                file=data["file"],
                description=data.get("description", ""),
                parameters=dict(data.get("parameters", {})),
                steps=list(data["steps"]),
                path=path,
                triggers=[str(t) for t in data.get("triggers", [])],
                narrowing=[dict(n) for n in data.get("narrowing", [])],
            )
        except (tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
            raise UsageError(f"edit recipe {path} is malformed ({exc}); fix or remove it") from None
        if recipe.knob in recipes:
            raise UsageError(
                f"two edit recipes for knob {recipe.knob!r}: {recipes[recipe.knob].path} and {path}"
            )
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
            result.not_implementable.append(
                {"knob": "", "reason": "the change names no knob in its parameters"}
            )
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
            result.not_implementable.append(
                {"knob": knob, "reason": "already in place: the recipe changes nothing"}
            )
    return result


def _field(change: Any, name: str) -> Any:
    return getattr(change, name, None) if not isinstance(change, dict) else change.get(name)


def apply_recipe(
    recipe: Recipe, params: dict[str, Any], harness_dir: Path, steps: list[dict[str, Any]] | None = None
) -> bool:
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
            raise RecipeError(
                f"recipe {recipe.knob!r}: parameter {name!r} must be {kind}, got {params[name]!r}"
            )
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
        rendered = {
            k: _render(v, literals, recipe.knob)
            for k, v in step.items()
            if k not in ("op", "file", "template")
        }
        sources[rel] = op(sources[rel], params=params, **rendered)
    for rel, source in sources.items():
        try:
            compile(source, rel, "exec")
        except SyntaxError as exc:
            raise RecipeError(
                f"recipe {recipe.knob!r} would leave {rel} with a syntax error: {exc}"
            ) from None
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
        raise RecipeError(
            f"recipe {recipe.knob!r}: create_file needs a template file beside the recipe, got {name!r}"
        )
    return path.read_text()


def _render(value: Any, literals: dict[str, str], knob: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return string.Template(value).substitute(literals)
    except (KeyError, ValueError) as exc:
        raise RecipeError(f"recipe {knob!r}: template refers to unknown parameter {exc}") from None
