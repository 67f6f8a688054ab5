"""Model prices: litellm's bundled price map, read offline, overridden by the project's own price file.

Sources, later ones winning:

1. litellm's `model_prices_and_context_window_backup.json` (shipped inside the litellm package, which τ²
   installs): `input_cost_per_token` / `output_cost_per_token` in USD per token, turned into USD per million
   tokens here. The file is read from litellm's package directory located with `importlib.util.find_spec`,
   which does not import litellm (an import takes seconds and, without LITELLM_LOCAL_MODEL_COST_MAP=True,
   fetches a price map over the network). Without litellm the map is empty: every real model is unknown.
2. `<rootdir>/.ecdysis/prices.json`: `{"models": {"<model>": {"prompt_per_mtok": 2.5, "completion_per_mtok":
   10.0}}}` in USD per million tokens; `0` is a valid price (a local server).

A model found in neither has an unknown cost: None, never 0. The simulated model (`sim`, `sim/<profile>`)
costs 0, labelled "simulated". Lookup (`price_of`): the name as given, then without a provider prefix
(`openai/gpt-4o-mini` -> `gpt-4o-mini`). This module must not import litellm, tau2 or a task suite.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.config import is_sim_model
from pytest_ecdysis.core.errors import UsageError

#: the price map file inside the litellm package.
LITELLM_MAP = "model_prices_and_context_window_backup.json"
#: the project's own price file, relative to the rootdir.
USER_FILE = Path(".ecdysis") / "prices.json"

Prices = dict[str, dict[str, Any]]


def litellm_map_path() -> Path | None:
    """The path of litellm's bundled price map, or None when litellm is not installed (or ships no map)."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / LITELLM_MAP
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=4)
def _litellm_prices(path: Path | None) -> Prices:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    table: Prices = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or name == "sample_spec":
            continue
        inp, out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
        if not isinstance(inp, int | float) or not isinstance(out, int | float):
            continue
        table[name] = {
            "prompt_per_mtok": float(inp) * 1e6,
            "completion_per_mtok": float(out) * 1e6,
            "source": "litellm",
        }
        if isinstance(entry.get("max_input_tokens"), int):
            table[name]["max_input_tokens"] = entry["max_input_tokens"]
    return table


def read_user_prices(path: Path) -> Prices:
    """The models of a price file of the `.ecdysis/prices.json` shape (USD per million tokens).

    Raises:
        UsageError: not valid JSON of that shape, or a negative price (names the file and the shape).
    """
    try:
        models = json.loads(path.read_text(encoding="utf-8"))["models"]
        table: Prices = {
            name: {
                "prompt_per_mtok": float(p["prompt_per_mtok"]),
                "completion_per_mtok": float(p["completion_per_mtok"]),
                "source": str(path),
            }
            for name, p in models.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"price table {path} is not valid: {exc!r}; expected "
            '{"models": {"<model>": {"prompt_per_mtok": 2.5, "completion_per_mtok": 10.0}}} (USD per million '
            "tokens; 0 for a local server)"
        ) from None
    negative = [n for n, p in table.items() if p["prompt_per_mtok"] < 0 or p["completion_per_mtok"] < 0]
    if negative:
        raise UsageError(
            f"price table {path}: negative price for {', '.join(negative)}; a price is USD per "
            "million tokens, >= 0"
        )
    return table


def load_prices(rootdir: Path | None = None) -> Prices:
    """`{model: {"prompt_per_mtok": USD, "completion_per_mtok": USD, "source": "litellm" | <file>}}`: litellm's
    map, then `<rootdir>/.ecdysis/prices.json` over it.

    Raises:
        UsageError: the project's price file is not valid (`read_user_prices`).
    """
    table = dict(_litellm_prices(litellm_map_path()))
    user = Path(rootdir) / USER_FILE if rootdir else None
    if user is not None and user.is_file():
        table.update(read_user_prices(user))
    return table


def price_of(model: str, prices: Prices) -> dict[str, Any] | None:
    """The price entry of `model`: by its name, else without a provider prefix; None when unknown."""
    return prices.get(model) or (prices.get(model.split("/", 1)[1]) if "/" in model else None)


def unknown_note(model: str) -> str:
    """The one sentence an unknown price is said with."""
    return (
        f"unknown model {model!r}: not in litellm's price map"
        + ("" if litellm_map_path() else " (litellm is not installed)")
        + "; add it to .ecdysis/prices.json"
    )


def cost_usd(model: str, tokens: dict[str, int], prices: Prices) -> tuple[float | None, str]:
    """(cost in USD or None when unknown, a note: "simulated", "priced" or "unknown model <name>: ...")."""
    if is_sim_model(model):
        return 0.0, "simulated"
    price = price_of(model, prices)
    if price is None:
        return None, unknown_note(model)
    cost = (
        tokens.get("prompt", 0) * price["prompt_per_mtok"]
        + tokens.get("completion", 0) * price["completion_per_mtok"]
    ) / 1e6
    return cost, "priced"
