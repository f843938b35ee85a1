"""The Selector protocol (scikit-learn style) and registry.

A selector scores every candidate (``decision_function``; higher is better, NaN = never pick) and
picks the best candidate per problem (``select``), breaking ties by the data's ``tiebreak`` rank
(smallest (generator_id, sample_index) wins). ``__init__`` only stores hyper-parameters; ``fit``
learns state in attributes ending in ``_``. Label-free selectors get only ``SelectionData``;
selectors with ``uses_labels = True`` also receive ``labels`` in ``fit`` and are reported as
label-based.

Selectors keep scikit-learn's estimator contract without importing scikit-learn (about a second of
start-up, scipy included, that ``monkeybarrel report`` of a majority vote does not need): ``Selector``
implements the parameter protocol the way scikit-learn's developer guide specifies it for estimators
that do not inherit ``BaseEstimator`` (parameters are the ``__init__`` arguments, stored under their
own names; ``get_params(deep=True)`` adds ``component__param`` for parameters that have
``get_params``; ``set_params`` sets nested ones), so ``sklearn.base.clone`` and nested
``set_params(model__threshold=...)`` work as on any estimator. scikit-learn is imported only where
scikit-learn itself is in play: ``NotFittedError`` is raised from it, ``__sklearn_tags__`` builds its
``Tags``, and selectors whose model is a scikit-learn estimator (Weaver, Smoothie) import it.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar

import numpy as np

from ..core.groups import group_argmax
from ..core.selection_data import SELECTORS, SelectionData

__all__ = ["SELECTORS", "Selector"]


class Selector(ABC):
    """Base class of every selection method: a scikit-learn estimator (``get_params(deep=True)``,
    nested ``set_params``, ``sklearn.clone``) over ``SelectionData``.

    ``decision_function`` and ``select`` raise sklearn's ``NotFittedError`` before ``fit``.
    """

    uses_labels: ClassVar[bool] = False
    """True for supervised or oracle methods: ``fit`` then receives ground-truth labels."""

    requires_fit: ClassVar[bool] = True
    """False for stateless selectors (scores from the data alone): they may select without ``fit``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("decision_function", "select"):  # both need a fitted selector
            if name in cls.__dict__:
                setattr(cls, name, _requires_fit(cls.__dict__[name]))

    # ---- scikit-learn's parameter protocol ----------------------------------------------------
    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The ``__init__`` arguments, sorted (scikit-learn's rule: no ``*args``)."""
        if cls.__init__ is object.__init__:
            return []
        parameters = [p for p in inspect.signature(cls.__init__).parameters.values()
                      if p.name != "self" and p.kind is not p.VAR_KEYWORD]
        if any(p.kind is p.VAR_POSITIONAL for p in parameters):
            raise RuntimeError(f"{cls.__name__}.__init__ must name its parameters (no *args), as scikit-learn "
                               "estimators do")
        return sorted(p.name for p in parameters)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """``{name: value}`` of the ``__init__`` parameters; with ``deep``, also ``name__param`` of each
        parameter that is itself an estimator (has ``get_params``)."""
        params: dict[str, Any] = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                params.update((f"{name}__{key}", inner) for key, inner in value.get_params().items())
            params[name] = value
        return params

    def set_params(self, **params: Any) -> "Selector":
        """Set parameters by name, nested ones as ``component__param``; returns self.

        Raises:
            ValueError: a name that is not a parameter (the valid names are listed).
        """
        valid = self.get_params(deep=True)
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, nests, inner = key.partition("__")
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for selector {type(self).__name__}. "
                                 f"Valid parameters are: {self._get_param_names()!r}.")
            if nests:
                nested.setdefault(name, {})[inner] = value
            else:
                setattr(self, name, value)
                valid[name] = value
        for name, inner_params in nested.items():
            valid[name].set_params(**inner_params)
        return self

    def __repr__(self) -> str:
        """``Class(param=value, ...)`` with the parameters that differ from their defaults (as scikit-learn prints)."""
        signature = inspect.signature(type(self).__init__).parameters
        changed = [f"{name}={value!r}" for name, value in self.get_params(deep=False).items()
                   if name not in signature or repr(value) != repr(signature[name].default)]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "_fitted", False) or not self.requires_fit

    def __sklearn_tags__(self):
        """scikit-learn's tags (asked for by scikit-learn's own helpers, so scikit-learn is loaded by then)."""
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False), requires_fit=self.requires_fit)

    def _check_fitted(self) -> None:
        """Raise scikit-learn's ``NotFittedError`` unless fitted (or stateless)."""
        if not self.__sklearn_is_fitted__():
            from sklearn.exceptions import NotFittedError  # only on the error path: importing scikit-learn takes ~1 s

            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with appropriate "
                                 "arguments before using this selector.")

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "Selector":
        """Learn from the data (label-free unless ``uses_labels``); returns self."""
        if labels is not None and not self.uses_labels:
            raise TypeError(f"{type(self).__name__} is label-free and must not be given labels")
        if labels is None and self.uses_labels:
            raise TypeError(f"{type(self).__name__} needs labels: fit(data, labels)")
        if labels is not None and np.shape(labels) != (data.n_candidates,):
            raise ValueError(f"labels must be [{data.n_candidates}] (one per candidate), got shape {np.shape(labels)}")
        self._fitted = True
        return self

    def notes(self) -> list[str]:
        """Plain-word remarks on the fit for the report (drops, fallbacks, warnings); none by default."""
        return []

    @abstractmethod
    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` float score per candidate; higher is better, NaN is never selected."""

    def select(self, data: SelectionData) -> np.ndarray:
        """``[n_problems]`` row index of the chosen candidate per problem (-1 when none can be chosen)."""
        return group_argmax(self.decision_function(data), data.groups, data.n_problems, data.tiebreak)

    def fit_select(self, data: SelectionData, labels: np.ndarray | None = None) -> np.ndarray:
        return self.fit(data, labels).select(data)


def _requires_fit(method: Callable) -> Callable:
    @functools.wraps(method)
    def checked(self: Selector, *args: Any, **kwargs: Any) -> Any:
        self._check_fitted()
        return method(self, *args, **kwargs)

    return checked
