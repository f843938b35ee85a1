"""Paper reproductions: ``monkeybarrel reproduce list`` and ``monkeybarrel reproduce NAME [--data PATH]``.

``catalog.RECIPES`` is the registry (names and descriptions, nothing heavy imported); each recipe's
module (``llmonk``, ``weaver``, ...) is imported when it runs.
"""

from __future__ import annotations

from .base import Comparison, Published, RecipeDataError, Row
from .catalog import RECIPES, Recipe


def all_recipes() -> dict[str, Recipe]:
    """Every recipe by name, in the registry's order."""
    return {recipe.name: recipe for recipe in RECIPES}


__all__ = ["Comparison", "Published", "Recipe", "RecipeDataError", "Row", "all_recipes"]
