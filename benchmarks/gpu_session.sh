#!/usr/bin/env bash
# One GPU-machine session for the sampling path (issues #27, #28), after the bundle parts of deploy/gpu_bundle.sh
# are in /tmp/vl (docs/gpu.md: carry one part a call). Stages, in one call or several:
#   STAGES="setup tests" bash benchmarks/gpu_session.sh
#   STAGES="auto1b auto8b" bash benchmarks/gpu_session.sh
#   STAGES="ray" bash benchmarks/gpu_session.sh
# Logs and JSON go to $OUT (the device tool brings them back).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
quiet() { grep -vE "^(INFO|WARNING|DEBUG|\(EngineCore|\(raylet|\(pid=)" ; }
for s in ${STAGES:-setup tests}; do
  t0=$(date +%s)
  case $s in
    setup)
      BUNDLE=/tmp/vl bash deploy/gpu_setup.sh 2>&1 | tee "$OUT/setup.log"
      nvidia-smi -L | tee -a "$OUT/setup.log"
      $PY -c "import sys; sys.path.insert(0,'benchmarks'); import ray_gpu as r, pathlib as p; r.shape_with_tokenizer('1b', p.Path('/tmp/tokenizer'), p.Path('/tmp/gpu_model_1b'))" ;;
    tests)
      MONKEYBARREL_GPU_MODEL=/tmp/gpu_model_1b timeout ${T_TESTS:-420} $PY -m pytest -q -s -m gpu -p no:cacheprovider \
        ${TEST_FILES:-tests/test_samplers_vllm_gpu.py tests/test_samplers_ray_gpu.py tests/test_kernels_paged.py} 2>&1 \
        | tee "$OUT/tests.log" | grep -E "ray kill|passed|failed|FAILED|Error|assert" | head -40 ;;
    auto1b|auto8b)
      timeout ${T_AUTO:-560} $PY benchmarks/vllm_attention_auto.py --presets ${s#auto} \
        --out "$OUT/vllm_attention_auto_${s#auto}.json" ${AUTO_ARGS:-} 2>&1 | tee "$OUT/$s.log" | quiet | tail -30 ;;
    ray)
      timeout ${T_RAY:-560} $PY benchmarks/ray_gpu.py --gsm8k .devcarry/gsm8k_test.jsonl --tokenizer /tmp/tokenizer --warmup \
        --out "$OUT/ray_gpu.json" ${RAY_ARGS:-} 2>&1 | tee "$OUT/ray.log" | quiet | tail -30 ;;
    profile8b)  # where ours spends an 8B job's time: kernel tables, and the same jobs without per-request seeds
      timeout ${T_AUTO:-560} $PY benchmarks/vllm_attention_auto.py --presets 8b --auto-only --unseeded \
        --jobs ${PROFILE_JOBS:-8x128x2048x128,4x64x7900x128} --profile /tmp/prof \
        --out "$OUT/vllm_attention_profile_8b.json" 2>&1 | tee "$OUT/$s.log" | quiet | tail -20
      for f in /tmp/prof/*/*.txt; do head -60 "$f" > "$OUT/$(basename "$(dirname "$f")")_$(basename "$f")"; done ;;
    sweep|separate)  # issue #28: a 4-point sweep on one engine, then the same points as 4 separate runs
      cp .devcarry/math500_test.jsonl .devcarry/gsm8k_test.jsonl /tmp/ 2>/dev/null
      PART=$s T_PART=${T_SWEEP:-560} bash benchmarks/sweep_device_run.sh 2>&1 | tail -40 ;;
    store)  # GSM8K x 16 with SmolLM2 + verifiers on the GPU: the store for the distillation study (#26)
      sed -e "s#[./]*shared/data/gsm8k/test.jsonl#$PWD/.devcarry/gsm8k_test.jsonl#" -e "s#smollm2-135m-instruct#/tmp/smol.gguf#g" \
        monkeybarrel/experiments/configs/gsm8k_weaver_gpu.yaml > /tmp/gsm8k_weaver_gpu.yaml
      timeout ${T_STORE:-560} $PY -m monkeybarrel.orchestrator.cli.main run /tmp/gsm8k_weaver_gpu.yaml \
        --out /tmp/gsm8k_weaver_gpu --no-progress 2>&1 | tee "$OUT/store.log" | quiet | tail -30
      tar -C /tmp -cf - gsm8k_weaver_gpu | xz -T8 -6 > "$OUT/gsm8k_weaver_gpu.tar.xz"
      cp /tmp/gsm8k_weaver_gpu/report.md "$OUT/gsm8k_weaver_gpu_report.md" 2>/dev/null ;;
  esac
  echo "== stage $s: $(( $(date +%s) - t0 ))s"
done
