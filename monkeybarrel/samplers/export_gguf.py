"""Convert a GGUF model into a HF safetensors directory that vLLM (and transformers) can load.

    python -m monkeybarrel.samplers.export_gguf MODEL.gguf OUT_DIR [--dtype bfloat16]
    python -m monkeybarrel.samplers.export_gguf smollm2-135m-instruct OUT_DIR

vLLM does not load GGUF directly; serve the directory with ``vllm serve OUT_DIR``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.models import EMBEDDED_MODEL, embedded_gguf_path, export_hf_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gguf", help=f"a .gguf file, or {EMBEDDED_MODEL} for the embedded model")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--dtype", default="float32", help="torch dtype of the saved weights")
    args = parser.parse_args(argv)
    gguf = embedded_gguf_path() if args.gguf == EMBEDDED_MODEL else Path(args.gguf)
    if not gguf.is_file():
        parser.error(f"{gguf}: GGUF file not found")
    print(export_hf_dir(gguf, args.out_dir, dtype=args.dtype))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
