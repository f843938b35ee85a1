#!/usr/bin/env bash
# One GPU machine of 4 GPUs for issues #31 and #32, in few calls (the device tool's budget): independent
# single-GPU benchmarks run side by side, one per GPU ("lanes"), then the multi-GPU runs. After the bundle
# of deploy/gpu_bundle.sh is in /tmp/vl (docs/gpu.md), from the checkout's root:
#   STAGES="setup" bash benchmarks/gpu_lanes.sh        # unpack, import check, GPU kernel tests
#   STAGES="single" bash benchmarks/gpu_lanes.sh       # #31: Monkeys 1B / 8B tables, cached restart, product path
#   STAGES="table" bash benchmarks/gpu_lanes.sh        # #31: the Monkeys table on one host (1B / 8B, ours / tuned)
#   STAGES="warm" bash benchmarks/gpu_lanes.sh         # #32: fill the engine cache for the data-parallel engine
#   STAGES="dp" bash benchmarks/gpu_lanes.sh           # #32: data parallel, 1 GPU and 2 GPUs side by side (DP_EPG=VARIANTS:
#                                                      # those ray_gpu.py variants at 1B on GPU 3 meanwhile, e.g. ray-1g-x4)
#   STAGES="dp4" bash benchmarks/gpu_lanes.sh          # #32: data parallel on 4 GPUs
#   STAGES="tpparity" bash benchmarks/gpu_lanes.sh     # #32: greedy TP 1 vs 2, ours and vLLM's attention (control)
#   STAGES="diag1" bash benchmarks/gpu_lanes.sh        # one GPU: a Ray worker's start split, cold and cached; 1B planning
#   STAGES="tp70b" bash benchmarks/gpu_lanes.sh        # #32: the 70B shape at tensor parallel 4, ours vs vLLM's attention
#   STAGES="mprof" bash benchmarks/gpu_lanes.sh        # #31: decode-step profiles (1B, 8B) and two engines per GPU (1B)
#   STAGES="dp4start" bash benchmarks/gpu_lanes.sh     # #32: where 4 data-parallel workers' start goes
#   STAGES="epg" bash benchmarks/gpu_lanes.sh          # #31: two and four engines a GPU through `monkeybarrel run` (1B)
#   STAGES="fp8parity" bash benchmarks/gpu_lanes.sh    # #31: FP8 KV greedy parity, scale 1.0 and calibrated, with the control
#   STAGES="imports" bash benchmarks/gpu_lanes.sh      # #32: importing vLLM, 4 processes at once, before / after bytecode
#   STAGES="start" bash benchmarks/gpu_lanes.sh        # #31: cold and cached starts, torch.compile or not (1B, 8B)
#   STAGES="x4" bash benchmarks/gpu_lanes.sh           # #31: four engines a GPU at 1B, ours and vLLM tuned, beside one of each
#   STAGES="s9b" bash benchmarks/gpu_lanes.sh          # FP8 parity (GPU 0), the product path, vLLM's attention (GPU 1) and
#                                                      # ours (GPU 3), each warmed; engine-start profile with gc.freeze A/B (GPU 2)
#   STAGES="tp70b" bash benchmarks/gpu_lanes.sh        # PROF70=DIR: the auto engine's kernel tables; JOBS70: the jobs
# DPV=-nc runs the data-parallel stages (dp, dp4) without torch.compile (ray_gpu.py's variant suffix).
# Each stage leaves $OUT/<stage>.tar.xz (every JSON and log) and prints its summary lines.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
GSM=${GSM:-.devcarry/gsm8k_test.jsonl}
CACHE=/tmp/engine_cache
T=${T_STAGE:-560}   # seconds a lane may run
lane() {  # lane NAME GPUS CMD...: run CMD on GPUS in the background, its output in $W/NAME.log
  local name=$1 gpus=$2; shift 2
  ( export CUDA_VISIBLE_DEVICES=$gpus; t0=$(date +%s); timeout "$T" "$@" > "$W/$name.log" 2>&1; rc=$?
    echo "== lane $name (GPU $gpus): exit $rc, $(( $(date +%s) - t0 )) s" >> "$W/lanes.txt" ) &
}
summary() { grep -hE '^\{"model"|"lever"|speed-up|positions_identical|fp8_speed|"tok_s"|ratio|engine_start_s|FAILED|passed|failed|Error' "$@" 2>/dev/null | cut -c1-400 | tail -60; }
for s in ${STAGES:-setup}; do
  W=/tmp/work_$s; mkdir -p "$W"; t0=$(date +%s)
  case $s in
    setup)
      if ls /tmp/vl/pack.part* >/dev/null 2>&1 && [ ! -f /tmp/vl/.unpacked ]; then
        cat /tmp/vl/pack.part* | tar -x -C /tmp/vl && touch /tmp/vl/.unpacked
      fi
      BUNDLE=/tmp/vl bash deploy/gpu_setup.sh 2>&1 | tee "$W/setup.log"
      nvidia-smi -L | tee -a "$W/setup.log"
      $PY -c "from monkeybarrel.core.models import resolve_model; print(resolve_model('/tmp/smol.gguf'))" 2>&1 | tail -1
      $PY benchmarks/model_shapes.py 1b --tokenizer /tmp/tokenizer --out /tmp/gpu_model_1b
      [ -n "$SETUP_TESTS" ] && CUDA_VISIBLE_DEVICES=0 MONKEYBARREL_GPU_MODEL=/tmp/gpu_model_1b timeout 300 $PY -m pytest -q \
        -m gpu -p no:cacheprovider -k "fp8 or replayed or layout0" tests/test_kernels_paged.py 2>&1 | tee "$W/tests.log" | tail -5 ;;
    single)  # the 8B product-path lane also fills the engine cache for the Ray workers' engine (same options)
      M="$PY benchmarks/monkeys_throughput.py --gsm8k $GSM --tokenizer /tmp/tokenizer --engine-cache $CACHE"
      lane mk1b 0 $M --presets 1b --n 1b:64 --columns vllm_tuned,ours --tuned 2048:32768 --restart \
        --workdir "$W/1b" --out "$W/monkeys_1b.json"
      lane mk8b 1 $M --presets 8b --n 8b:32 --columns ours,vllm_default --workdir "$W/8b" --out "$W/monkeys_8b.json"
      lane mk8bt 2 $M --presets 8b --n 8b:32 --columns vllm_tuned --workdir "$W/8bt" --out "$W/monkeys_8b_tuned.json"
      lane product 3 $PY benchmarks/ray_gpu.py --preset 8b --gsm8k $GSM --tokenizer /tmp/tokenizer \
          --problems 64 --samples 64 --max-tokens 128 --shots 16 --variants direct-vllm,direct \
          --baseline direct-vllm --engine-cache $CACHE --workdir $W/product --out $W/product_path.json
      wait; cat "$W/lanes.txt"; summary "$W"/*.log ;;
    table)  # #31's Monkeys table on one host, one engine per GPU: 1B ours / tuned, 8B ours / tuned
      M="$PY benchmarks/monkeys_throughput.py --gsm8k $GSM --tokenizer /tmp/tokenizer --engine-cache $CACHE"
      lane t1b 0 $M --presets 1b --n 1b:64 --columns ours --workdir "$W/1b" --out "$OUT/monkeys_1b_ours.json"
      lane t1bt 1 $M --presets 1b --n 1b:64 --columns vllm_tuned --tuned 2048:32768 --workdir "$W/1bt" \
        --out "$OUT/monkeys_1b_tuned.json"
      lane t8b 2 $M --presets 8b --n 8b:32 --columns ours --workdir "$W/8b" --out "$OUT/monkeys_8b_ours.json"
      lane t8bt 3 $M --presets 8b --n 8b:32 --columns vllm_tuned --workdir "$W/8bt" --out "$OUT/monkeys_8b_tuned.json"
      wait; cat "$W/lanes.txt"; summary "$W"/*.log ;;
    warm)  # fill the engine cache for the data-parallel workers' engine (8B, 2,048 sequences: same compile key)
      timeout 300 $PY benchmarks/ray_gpu.py --preset 8b --gsm8k $GSM --tokenizer /tmp/tokenizer --samples 256 \
        --variants ray-1 --only-warmup --engine-cache $CACHE --workdir "$W/warm" > "$W/warm.log" 2>&1
      echo "warm-up exit $?"; grep -h '"variant"' "$W/warm.log" | cut -c1-600 ;;
    dp)  # data parallel, #32's job (8B, 128 x 256 x $DPTOK tokens): 1 GPU and 2 GPUs, side by side on one host
      R="$PY benchmarks/ray_gpu.py --preset 8b --gsm8k $GSM --tokenizer /tmp/tokenizer --problems 128 --samples 256 \
         --max-tokens ${DPTOK:-256} --shots 4 --engine-cache $CACHE"
      lane dp1 0 $R --variants ray-1$DPV --workdir "$W/dp1" --out "$OUT/dp_1.json"
      lane dp2 1,2 $R --variants ray-2g$DPV --workdir "$W/dp2" --out "$OUT/dp_2.json"
      [ -n "$DP_EPG" ] && lane epg1b 3 $PY benchmarks/ray_gpu.py --gsm8k $GSM --tokenizer /tmp/tokenizer --problems 128 \
        --samples 64 --max-tokens 256 --shots 4 --engine-cache $CACHE --variants "$DP_EPG" --preset 1b --warmup \
        --workdir "$W/epg1b" --out "$OUT/engines_per_gpu_1b.json"
      wait; cat "$W/lanes.txt"; grep -h '"variant"' "$W"/*.log | cut -c1-700 ;;
    s9b)
      lane fp8 0 $PY benchmarks/greedy_parity.py --mode fp8 --gguf /tmp/smol.gguf --gsm8k $GSM --out "$OUT/parity_fp8.json"
      P="$PY benchmarks/ray_gpu.py --preset 8b --gsm8k $GSM --tokenizer /tmp/tokenizer --problems 64 --samples 64 \
         --max-tokens 128 --shots 16 --engine-cache $CACHE --warmup"
      lane prodv 1 $P --variants direct-vllm --workdir "$W/pv" --out "$OUT/product_vllm.json"
      lane prodo 3 $P --variants direct --workdir "$W/po" --out "$OUT/product_ours.json"
      lane startprof 2 $PY benchmarks/engine_start_profile.py --preset 8b --tokenizer /tmp/tokenizer \
        --engine-cache /tmp/cache_sp --compare-freeze --out-dir "$W/sp"
      wait; cat "$W/lanes.txt"; grep -h '"variant"' "$W"/*.log | cut -c1-900; summary "$W"/fp8.log
      grep -h '"run"' "$W"/startprof.log | cut -c1-700 ;;
    mprof)  # #31: where a decode step goes (kernel tables, ms a step) at 1B and 8B, ours and vLLM tuned, and the
      # 1B table with two engines sharing each GPU (is a step bound by vLLM's CPU work per sequence?)
      M="$PY benchmarks/monkeys_throughput.py --gsm8k $GSM --tokenizer /tmp/tokenizer --engine-cache $CACHE"
      lane p1b 0 $M --presets 1b --n 1b:64 --columns ours,vllm_tuned --tuned 2048:32768 --profile \
        --workdir "$W/1b" --out "$OUT/monkeys_1b_profile.json"
      lane x1b 1 $M --presets 1b --n 1b:64 --columns ours --engines-per-gpu 2 --workdir "$W/x1b" \
        --out "$OUT/monkeys_1b_x2_ours.json"
      lane x1bt 2 $M --presets 1b --n 1b:64 --columns vllm_tuned --tuned 2048:32768 --engines-per-gpu 2 \
        --workdir "$W/x1bt" --out "$OUT/monkeys_1b_x2_tuned.json"
      lane p8b 3 $M --presets 8b --n 8b:32 --columns ours,vllm_tuned --profile --workdir "$W/8b" \
        --out "$OUT/monkeys_8b_profile.json"
      wait; cat "$W/lanes.txt"; summary "$W"/*.log ;;
    epg)  # #31 through the product: `monkeybarrel run`, backend ray, one worker against two and four sharing the GPU
      # (engines_per_gpu: 2, 4), 1B, 128 GSM8K x 64 samples x 256 tokens, 4-shot system prompt; two lanes (GPUs 0,
      # 1), each first filling the engine cache with a short run of its first variant
      R="$PY benchmarks/ray_gpu.py --gsm8k $GSM --tokenizer /tmp/tokenizer --problems 128 --samples 64 \
         --max-tokens 256 --shots 4 --engine-cache $CACHE --preset 1b --baseline ray-1 --warmup"
      lane epg1 0 $R --variants ray-1,ray-2 --workdir "$W/a" --out "$OUT/engines_per_gpu_1b_a.json"
      lane epg4 1 $R --variants ray-1g-x4 --workdir "$W/b" --out "$OUT/engines_per_gpu_1b_b.json"
      wait; cat "$W/lanes.txt"; grep -h '"variant"' "$W"/*.log | cut -c1-900 ;;
    fp8parity)  # #31: greedy tokens, bf16 KV against FP8 (scale 1.0 and calibrated), ours and vLLM's attention
      CUDA_VISIBLE_DEVICES=0,1,2,3 timeout ${T_FP8:-400} $PY benchmarks/greedy_parity.py --mode fp8 --gguf /tmp/smol.gguf \
        --gsm8k $GSM --out "$OUT/parity_fp8.json" > "$W/fp8parity.log" 2>&1
      echo "fp8 parity exit $?"; summary "$W/fp8parity.log" ;;
    dp4start)  # where 4 data-parallel workers' start goes (phases vLLM times, Ray's part, imports): a short job
      CUDA_VISIBLE_DEVICES=0,1,2,3 timeout ${T_DP4:-240} $PY benchmarks/ray_gpu.py --preset 8b --gsm8k $GSM \
        --tokenizer /tmp/tokenizer --problems 128 --samples 256 --max-tokens 128 --shots 4 --engine-cache $CACHE \
        --variants ray-4g --only-warmup --workdir "$W/dp4s" --out "$OUT/dp_4_start.json" > "$W/dp4start.log" 2>&1
      grep -h '"variant"' "$W/dp4start.log" | cut -c1-1500 ;;
    dp4)  # data parallel on 4 GPUs (same job)
      R="$PY benchmarks/ray_gpu.py --preset 8b --gsm8k $GSM --tokenizer /tmp/tokenizer --problems 128 --samples 256 \
         --max-tokens ${DPTOK:-256} --shots 4 --engine-cache $CACHE"
      CUDA_VISIBLE_DEVICES=0,1,2,3 timeout ${T_DP4:-280} $R --variants ray-4g$DPV --workdir "$W/dp4" \
        --out "$OUT/dp_4.json" > "$W/dp4.log" 2>&1
      grep -h '"variant"' "$W/dp4.log" | cut -c1-700 ;;
    tpparity)  # greedy tokens at TP 1 vs 2, ours and vLLM's attention (the control), free-running and teacher-forced
      CUDA_VISIBLE_DEVICES=0,1,2,3 timeout ${T_TP:-400} $PY benchmarks/greedy_parity.py --mode tp --gguf /tmp/smol.gguf \
        --gsm8k $GSM --out "$OUT/parity_tp.json" > "$W/tpparity.log" 2>&1
      echo "tp parity exit $?"; summary "$W/tpparity.log" ;;
    diag1)  # one GPU: where a Ray worker's start goes, cold and with the filled engine cache, against a direct
      # engine; then the 1B natural Monkeys job for ours' planning time per decode step
      R="$PY benchmarks/ray_gpu.py --preset 8b --gsm8k $GSM --tokenizer /tmp/tokenizer --problems 32 --samples 128 \
         --max-tokens 64 --shots 4 --engine-cache $CACHE"
      for run in cold warm; do
        variants=ray-1; [ $run = warm ] && variants=ray-1,ray-1-spawn,direct
        timeout 220 $R --variants $variants --baseline ray-1 --workdir "$W/$run" --out "$OUT/ray1_$run.json" > "$W/$run.log" 2>&1
        grep -h '"variant"' "$W/$run.log" | cut -c1-600
        tail -c 30000 /tmp/ray/session_latest/logs/worker-*.err > "$OUT/ray1_${run}_worker.err" 2>/dev/null
      done
      timeout 220 $PY benchmarks/monkeys_throughput.py --gsm8k $GSM --tokenizer /tmp/tokenizer --engine-cache $CACHE \
        --presets 1b --n 1b:64 --variants natural --columns ours --workdir "$W/1b" --out "$OUT/monkeys_1b_plan.json" \
        > "$W/1b.log" 2>&1
      summary "$W"/*.log ;;
    imports)  # what importing vLLM costs 4 fresh processes at once (engines starting side by side), then one process's
      # -X importtime; before and after the unpacked site's bytecode is compiled (setup with COMPILE_BYTECODE=0 first)
      for when in before after; do
        if [ $when = after ]; then
          t1=$(date +%s%N); $PY -m compileall -q -j 0 /tmp/site > /dev/null 2>&1; touch /tmp/site/.bytecode
          echo "{\"compileall_s\": $(( ($(date +%s%N) - t1) / 1000000 ))e-3}" | tee "$W/compileall.txt"
        fi
        for i in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$i $PY benchmarks/import_time.py > "$W/import_${when}_$i.txt" 2>&1 & done
        wait; for i in 0 1 2 3; do echo "$when $(tail -1 "$W/import_${when}_$i.txt")"; done | tee -a "$OUT/imports.txt"
      done
      $PY benchmarks/import_time.py | sed 's/^/alone /' | tee -a "$OUT/imports.txt"
      $PY -X importtime -c "from vllm import LLM" 2> "$W/importtime.txt"
      sort -t'|' -k2 -n -r "$W/importtime.txt" | head -25 ;;
    start)  # engine starts on this fresh machine, cold (an empty cache) then again (the cache it filled), with
      # torch.compile (vLLM's default) and without (torch_compile: false), 1B and 8B, and each job's generation speed:
      # GSM8K 128 x 32 x 256 tokens, 4-shot; the 8B compiled lane fills $CACHE (the data-parallel engine's key)
      S="$PY benchmarks/ray_gpu.py --gsm8k $GSM --tokenizer /tmp/tokenizer --problems 128 --samples 32 --max-tokens 256 \
         --shots 4"
      startlane() {  # startlane NAME GPU PRESET VARIANT CACHE
        lane "$1" "$2" bash -c "$S --preset $3 --variants $4 --engine-cache $5 --workdir $W/$1 --out $OUT/start_$1_cold.json \
          && $S --preset $3 --variants $4 --engine-cache $5 --workdir $W/$1 --out $OUT/start_$1_cached.json"
      }
      startlane s8b 0 8b direct $CACHE; startlane s8bnc 1 8b direct-nc /tmp/cache_s8bnc
      startlane s1b 2 1b direct /tmp/cache_s1b; startlane s1bnc 3 1b direct-nc /tmp/cache_s1bnc
      wait; cat "$W/lanes.txt"; grep -h '"variant"' "$W"/*.log | cut -c1-900 ;;
    x4)  # #31: four engines sharing each GPU at 1B, ours and vLLM tuned, beside one engine of each (every engine's
      # log kept); no torch.compile, so a fresh machine compiles nothing
      M="$PY benchmarks/monkeys_throughput.py --gsm8k $GSM --tokenizer /tmp/tokenizer --engine-cache $CACHE --no-compile \
         --presets 1b --n 1b:64"
      lane x4 0 $M --columns ours --engines-per-gpu 4 --workdir "$W/x4" --out "$OUT/monkeys_1b_x4_ours.json"
      lane x4t 1 $M --columns vllm_tuned --tuned 2048:32768 --engines-per-gpu 4 --workdir "$W/x4t" \
        --out "$OUT/monkeys_1b_x4_tuned.json"
      lane x1 2 $M --columns ours --workdir "$W/x1" --out "$OUT/monkeys_1b_x1_ours.json"
      lane x1t 3 $M --columns vllm_tuned --tuned 2048:32768 --workdir "$W/x1t" --out "$OUT/monkeys_1b_x1_tuned.json"
      wait; cat "$W/lanes.txt"; summary "$W"/*.log ;;
    tp70b)
      CUDA_VISIBLE_DEVICES=0,1,2,3 timeout "$T" $PY benchmarks/vllm_attention_auto.py --presets 70b --tp 4 --once \
        --same-engine --jobs "${JOBS70:-8x128x2048x128,32x64x1024x128,256x1x2048x128}" \
        ${PROF70:+--profile "$PROF70"} --out "$OUT/tp4_70b.json" > "$W/tp70b.log" 2>&1
      grep -vE "^(INFO|WARNING|DEBUG|\(EngineCore|\(Worker|\(raylet|\(pid=)" "$W/tp70b.log" | tail -25 ;;
  esac
  find "$W" -name '*.log' -o -name '*.txt' -o -name 'manifest.json' | tar -cJf "$OUT/$s.tar.xz" -T - 2>/dev/null
  echo "== stage $s: $(( $(date +%s) - t0 ))s"
done
