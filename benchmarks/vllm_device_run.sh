#!/usr/bin/env bash
# Device calls for the vLLM backend (issue #13), after the vLLM bundle parts are in /tmp/vl and the
# SmolLM2 GGUF parts in /tmp/gguf (see docs/kernels.md, "vLLM backend: reproduce"):
#   STAGES="setup tests gsm8k" bash benchmarks/vllm_device_run.sh     # one call
#   STAGES="bench" bash benchmarks/vllm_device_run.sh                  # the next call
# Logs and JSON go to $OUT.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
for s in ${STAGES:-setup tests gsm8k bench}; do
  t0=$(date +%s)
  case $s in
    setup)
      if [ ! -d /tmp/site/vllm ]; then
        mkdir -p /tmp/site && cat /tmp/vl/vllm026.part* | xz -dc -T8 | tar -x -C /tmp/site || exit 1
      fi
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devcarry/whl/*.whl
      # editable install: registers the vllm.general_plugins entry point for vLLM's processes
      python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -2
      [ -s /tmp/smol.gguf ] || ! ls /tmp/gguf/gguf.part* >/dev/null 2>&1 || cat /tmp/gguf/gguf.part* > /tmp/smol.gguf
      { nvidia-smi -L; python3 -c "import torch, triton, vllm; print('torch', torch.__version__, 'triton', triton.__version__, 'vllm', vllm.__version__)"
        python3 -c "import importlib.metadata as m; print([e.value for e in m.entry_points(group='vllm.general_plugins')])"; } 2>&1 | tee "$OUT/env.log" ;;
    tests)
      timeout ${T_TESTS:-200} python3 -m pytest -q -s -m gpu -p no:cacheprovider \
        ${TEST_FILES:-tests/test_kernels_paged.py tests/test_kernels_triton.py} 2>&1 | tee "$OUT/tests.log" | grep -E "parity|replay|passed|failed|FAILED|Error" ;;
    gsm8k)
      [ -s /tmp/smol.gguf ] || cat /tmp/gguf/gguf.part* > /tmp/smol.gguf
      sed -e "s#[./]*shared/data/gsm8k/test.jsonl#$PWD/.devcarry/gsm8k_test.jsonl#" -e "s#smollm2-135m-instruct#/tmp/smol.gguf#" \
        monkeybarrel/experiments/configs/gsm8k_vllm_gpu.yaml > /tmp/gsm8k_gpu.yaml
      timeout ${T_GSM8K:-300} python3 -m monkeybarrel.orchestrator.cli.main run /tmp/gsm8k_gpu.yaml --out /tmp/gsm8k_gpu \
        --no-progress 2>&1 | tee "$OUT/gsm8k.log" | grep -vE "^(INFO|WARNING|\(EngineCore)" | tail -40
      cp /tmp/gsm8k_gpu/report.md "$OUT/gsm8k_report.md" 2>/dev/null
      cp /tmp/gsm8k_gpu/metrics.json "$OUT/gsm8k_metrics.json" 2>/dev/null ;;
    bench)
      timeout ${T_BENCH:-560} python3 benchmarks/vllm_backend.py --model-dir /tmp/llama1b --out "$OUT/vllm_backend_h100.json" \
        ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | grep -vE "^(INFO|WARNING|\(EngineCore)" | tail -60 ;;
  esac
  echo "== stage $s: $(( $(date +%s) - t0 ))s"
done
