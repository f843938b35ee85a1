"""Paper reproductions: ``monkeybarrel reproduce list`` and ``monkeybarrel reproduce NAME [--data PATH]``.

Each module lists its ``RECIPES`` (see ``base.Recipe``); ``RECIPE_MODULES`` is the registry.
"""

from __future__ import annotations

from importlib import import_module

from .base import Comparison, Published, Recipe, RecipeDataError, Row

RECIPE_MODULES = ("llmonk", "weaver", "smoothie", "codemonkeys", "datasets")
"""Modules of this package that define ``RECIPES``."""


def all_recipes() -> dict[str, Recipe]:
    """Every recipe by name, in the registry's order."""
    recipes: dict[str, Recipe] = {}
    for module in RECIPE_MODULES:
        for recipe in import_module(f"{__name__}.{module}").RECIPES:
            recipes[recipe.name] = recipe
    return recipes


__all__ = ["Comparison", "Published", "Recipe", "RecipeDataError", "Row", "all_recipes"]
