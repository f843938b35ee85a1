#!/usr/bin/env bash
# One device call: GPU tests (parity), kernel benchmark, end-to-end decode benchmark. Logs to $OUT.
# Expects FlashInfer wheels in .whl/ (see /work/shared/wheels/flashinfer-h100/README.md).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# The device image lacks some of the package's core dependencies (pydantic, ...). The kernels need
# only torch/triton/transformers: if `import monkeybarrel` fails there, a sitecustomize registers the
# package as a bare namespace so that `monkeybarrel.kernels` imports without the root __init__.
if ! python3 -c "import monkeybarrel" >/dev/null 2>&1; then
  mkdir -p /tmp/mbshim
  cat > /tmp/mbshim/sitecustomize.py <<PY
import sys, types
_pkg = types.ModuleType("monkeybarrel")
_pkg.__path__ = ["$PWD/monkeybarrel"]
sys.modules.setdefault("monkeybarrel", _pkg)
PY
  export PYTHONPATH=/tmp/mbshim:$PYTHONPATH
  echo "note: import monkeybarrel fails here (missing core deps); kernels imported through a namespace shim"
fi
{ nvidia-smi -L; python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"; } 2>&1 | tee "$OUT/env.log"
STAGES=${STAGES:-"tests bench e2e"}
for s in $STAGES; do
  t0=$(date +%s)
  case $s in
    tests) timeout ${T_TESTS:-240} python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/test_kernels_triton.py tests/test_kernels_hf.py 2>&1 | tee "$OUT/tests.log" | grep -E "parity|passed|failed|FAILED|Error" ;;
    bench) timeout ${T_BENCH:-300} python3 benchmarks/prefix_attention.py --out "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -vE "^  sweep" ;;
    e2e)   timeout ${T_E2E:-150} python3 benchmarks/hydragen_decode.py --out "$OUT/e2e.json" ${E2E_ARGS:-} 2>&1 | tee "$OUT/e2e.log" ;;
  esac
  echo "== stage $s: $(( $(date +%s) - t0 ))s"
done
