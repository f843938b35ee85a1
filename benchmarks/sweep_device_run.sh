#!/usr/bin/env bash
# The shared-engine measurement of issue #28 on the GPU machine: a 4-point sweep (GSM8K, MATH500 x 2
# temperatures, SmolLM2-135M on vLLM) against the same 4 points as separate `monkeybarrel run`s.
# Before: `STAGES=setup bash benchmarks/vllm_device_run.sh` on the same warm machine (vLLM in /tmp/site,
# monkeybarrel installed, the SmolLM2 GGUF at /tmp/smol.gguf), and the two test files carried as
# .devcarry/gsm8k_test.jsonl and .devcarry/math500_test.jsonl. Two calls (each must stay under 10 min):
#   PART=sweep bash benchmarks/sweep_device_run.sh       # the sweep: 1 engine start, status, report
#   PART=separate bash benchmarks/sweep_device_run.sh    # the 4 separate runs, then the JSON
# ATTENTION=monkeybarrel (or vllm) where the vllm backend has no `attention: auto` yet.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
[ -s /tmp/smol.gguf ] || ! ls /tmp/gguf/gguf.part* >/dev/null 2>&1 || cat /tmp/gguf/gguf.part* > /tmp/smol.gguf
sed -e "s#[./]*shared/data/gsm8k/test.jsonl#$PWD/.devcarry/gsm8k_test.jsonl#g" \
    -e "s#[./]*shared/data/math500/test.jsonl#$PWD/.devcarry/math500_test.jsonl#g" \
    -e "s#smollm2-135m-instruct#/tmp/smol.gguf#" -e "s#attention: auto#attention: ${ATTENTION:-auto}#" \
    monkeybarrel/experiments/configs/sweep_gsm8k_vllm_gpu.yaml > /tmp/sweep_gpu.yaml
t0=$(date +%s)
timeout ${T_PART:-580} python3 benchmarks/sweep_engines.py /tmp/sweep_gpu.yaml --out /tmp/sweep_engines --part "${PART:-sweep}" \
  2>&1 | tee "$OUT/sweep_engines_${PART:-sweep}.log" | grep -vE "^(INFO|WARNING|\(EngineCore)" | tail -40
cp /tmp/sweep_engines/sweep_engines.json "$OUT/" 2>/dev/null
if [ "${PART:-sweep}" = sweep ]; then
  COLUMNS=100 python3 -m monkeybarrel.orchestrator.cli.main sweep status /tmp/sweep_engines/sweep | tee "$OUT/sweep_status.txt"
  python3 -m monkeybarrel.orchestrator.cli.main sweep report /tmp/sweep_engines/sweep > "$OUT/sweep_report.txt" 2>&1
  cp /tmp/sweep_engines/sweep/report.md /tmp/sweep_engines/sweep/report.png /tmp/sweep_engines/sweep/sweep.json "$OUT/" 2>/dev/null
fi
echo "== part ${PART:-sweep}: $(( $(date +%s) - t0 ))s"
