"""``monkeybarrel reproduce list | NAME [--data PATH] [--out DIR]``: run a recipe, print and write the table."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from rich.console import Console

from ...core.hub import DataUnavailableError
from . import all_recipes
from .base import print_comparison, write_outputs


def reproduce(name: str, data: str | None, out: Path | None, console: Console) -> int:
    """Exit status: 0 done, 2 unknown recipe / unusable data / hub unreachable (message on stderr)."""
    recipes = all_recipes()
    if name == "list":
        console.print("recipes: monkeybarrel reproduce NAME [--data PATH]", soft_wrap=True)
        for recipe in recipes.values():  # one block per recipe: readable at any width, piped or not
            console.print(f"\n[bold]{recipe.name}[/bold]  {recipe.title}", soft_wrap=False)
            for label, text in (("paper", recipe.paper), ("data", recipe.dataset), ("--data", recipe.data_help)):
                console.print(textwrap.fill(text, width=max(console.width, 40), initial_indent=f"  {label}: ",
                                            subsequent_indent="      ", break_on_hyphens=False),
                              markup=False, highlight=False, soft_wrap=True)
        return 0
    recipe = recipes.get(name)
    if recipe is None:
        print(f"error: unknown recipe {name!r}; known: {', '.join(recipes)} (see `monkeybarrel reproduce list`)",
              file=sys.stderr)
        return 2
    if data is not None and not Path(data).exists():
        print(f"error: --data {data}: no such file or directory ({recipe.name} takes {recipe.data_help})", file=sys.stderr)
        return 2
    out = out or Path("runs") / "reproduce" / recipe.name
    try:
        result = recipe.run(data, out)
    except DataUnavailableError as exc:
        print(f"error: {recipe.name}: {exc} (--data takes {recipe.data_help})", file=sys.stderr)
        return 2
    except (ValueError, KeyError, RuntimeError) as exc:  # schema errors name the file, row and field
        from ...orchestrator.store.config_guard import ConfigConflictError
        from ...orchestrator.store.experiment_store import StoreError

        if not isinstance(exc, (ValueError, KeyError, StoreError, ConfigConflictError)):
            raise
        print(f"error: {recipe.name}: {exc}", file=sys.stderr)
        return 2
    print_comparison(result, console)
    report = write_outputs(result, out)
    console.print(f"report: {report}")
    return 0
