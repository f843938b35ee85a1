"""Random-weight Llama shapes for the GPU benchmarks: model directories vLLM loads with ``load_format="dummy"``.

A directory holds the shape's ``config.json`` and, when a tokenizer is given, that tokenizer with its
vocabulary extended to the shape's (``<|pad_N|>`` entries up to 128,256 for the Llama-3 shapes), so the
engine detokenises every id a random model can sample. Nothing is downloaded: the tokenizer is SmolLM2's
(``deploy/gpu_bundle.sh deps`` carries it to the GPU machine as ``/tmp/tokenizer``).

    python benchmarks/model_shapes.py 8b --tokenizer /tmp/tokenizer --out /tmp/model_8b
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PRESETS = {  # Llama-3-70B, Llama-3-8B, Llama-3.2-3B, Llama-3.2-1B shapes
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, head_dim=128, vocab_size=128256),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, vocab_size=128256),
    "3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
               num_key_value_heads=8, head_dim=128, vocab_size=128256),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64, vocab_size=128256),
}
MAX_POSITIONS = 8448


def extend_tokenizer(tokenizer: Path, out: Path, vocab_size: int) -> None:
    """Copy ``tokenizer``'s files into ``out`` with ``tokenizer.json``'s vocabulary padded to ``vocab_size``
    ids (byte-level BPE entries ``<|pad_N|>`` that no merge produces: prompts tokenise as before)."""
    out.mkdir(parents=True, exist_ok=True)
    for f in tokenizer.iterdir():
        if f.is_file() and f.name.startswith(("tokenizer", "special_tokens", "chat_template", "generation_config")):
            (out / f.name).write_bytes(f.read_bytes())
    spec = json.loads((tokenizer / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in spec.get("added_tokens", [])}
    for i in range(vocab_size):
        if i not in taken:
            vocab[f"<|pad_{i}|>"] = i
    (out / "tokenizer.json").write_text(json.dumps(spec))


def shape_dir(preset: str, out: Path, tokenizer: Path | None = None, vocab_size: int | None = None) -> Path:
    """A model directory for ``preset`` (its config; the tokenizer, extended to the vocabulary, if given)."""
    out.mkdir(parents=True, exist_ok=True)
    shape = {**PRESETS[preset], **({"vocab_size": vocab_size} if vocab_size else {})}
    ids = {"bos_token_id": 1, "eos_token_id": 2}
    if tokenizer is not None:
        extend_tokenizer(tokenizer, out, shape["vocab_size"])
        generation = tokenizer / "generation_config.json"
        if generation.exists():
            known = json.loads(generation.read_text())
            ids = {k: known.get(k, v) for k, v in ids.items()}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
              "max_position_embeddings": MAX_POSITIONS, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "hidden_act": "silu", "tie_word_embeddings": False, **ids, **shape}
    (out / "config.json").write_text(json.dumps(config))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset", choices=sorted(PRESETS))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path)
    a = ap.parse_args()
    print(shape_dir(a.preset, a.out, a.tokenizer))
