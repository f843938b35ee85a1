#!/usr/bin/env bash
# On the GPU machine: unpack the bundles of deploy/gpu_bundle.sh into SITE (default /tmp/site) and install
# monkeybarrel from this checkout (editable, no dependencies: registers the vLLM plugin entry point).
#   BUNDLE=/tmp/vl bash deploy/gpu_setup.sh && export PYTHONPATH=/tmp/site
# BUNDLE holds vllm026.part*, ray.tar.xz, deps.tar.xz and gguf.part* (any of them; each is unpacked once).
# Also writes /tmp/smol.gguf (from gguf.part*) and /tmp/tokenizer (SmolLM2's tokenizer files).
set -euo pipefail
bundle=${BUNDLE:-/tmp/vl}; site=${SITE:-/tmp/site}
py=${PYTHON:-$(command -v python3)}
mkdir -p "$site"
if ls "$bundle"/vllm026.part* >/dev/null 2>&1 && [ ! -d "$site/vllm" ]; then
  cat "$bundle"/vllm026.part* | xz -dc -T8 | tar -x -C "$site"
fi
if [ -f "$bundle/ray.tar.xz" ] && [ ! -d "$site/ray" ]; then
  xz -dc -T8 "$bundle/ray.tar.xz" | tar -x -C "$site"
  find "$site/ray/core" -type f ! -name '*.py' -exec chmod +x {} +   # gcs_server, raylet: executables
fi
if [ -f "$bundle/deps.tar.xz" ] && [ ! -d /tmp/tokenizer ]; then
  mkdir -p /tmp/deps && xz -dc "$bundle/deps.tar.xz" | tar -x -C /tmp/deps
  "$py" -m pip install -q --no-index --no-deps --target "$site" /tmp/deps/whl/*.whl
  cp -r /tmp/deps/tokenizer /tmp/tokenizer
fi
if ls "$bundle"/gguf.part* >/dev/null 2>&1 && [ ! -s /tmp/smol.gguf ]; then
  cat "$bundle"/gguf.part* > /tmp/smol.gguf
fi
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
if [ "${COMPILE_BYTECODE:-1}" = 1 ] && [ ! -f "$site/.bytecode" ]; then
  # pip writes a package's bytecode as it installs it; an unpacked tree has none, so each process that first
  # imports a module compiles it, and engines starting side by side each compile all of vLLM at once
  "$py" -m compileall -q -j 0 "$site" > /dev/null 2>&1; touch "$site/.bytecode"
fi
"$py" -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warning | tail -2 || true
"$py" - <<'PY'
import importlib, importlib.metadata as md
for name in ("torch", "triton", "vllm", "ray", "pyarrow", "pydantic", "yaml", "rich", "math_verify", "sklearn",
             "matplotlib", "tenacity", "httpx", "monkeybarrel"):
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', 'ok')}")
    except Exception as exc:
        print(f"{name} MISSING ({type(exc).__name__}: {exc})")
print("vllm plugins:", [e.value for e in md.entry_points(group="vllm.general_plugins")])
PY
