#!/usr/bin/env bash
# Every GPU check in one call, ending with a short table:  bash utils/gpu_check.sh [--sweep | --tiles | --quick] [OUT_DIR]
#
#   1. the machine: GPU, driver, torch / triton / transformers versions
#   2. ./benchmark.sh on the test clip, 13 tokens, random weights: Triton example bf16
#   3. full-size parity with transformers (random weights, identical for both), fp32 and bf16,
#      with transformers' own time per transcription as the speed anchor (utils/gpu_parity.py)
#   4. the same benchmark for the Triton example in fp32, scratch in bf16, the Triton template
#      (--allow-reference all) and the template with the example's kernels filled in
#   5. benchmark_detailed.py for the Triton example against scratch, bf16 (with transformers as a
#      third column) and fp32: components, kernels, roofline plots
#   6. with --sweep: utils/sweep_linear.py, the tile-configuration sweep behind layers._linear_config
#
# --tiles is the short loop for tuning the encoder's GEMM tiles instead: the machine, the bf16
# benchmark with and without PDL, bf16 parity of the Triton example, then the encoder sections of
# the sweep in bf16 and fp32. --quick, for a second GPU model within the same device budget: the
# machine, the Triton example's benchmark in bf16 (with and without PDL) and fp32, and its parity.
#
# Each step has its own time limit and a failed step does not stop the next. Everything lands in
# OUT_DIR (default $OUT on the device machine): log.txt, parity.jsonl, bench.jsonl, summary.md,
# detailed.tgz (JSON, CSV and plots of step 5) and sweep.json. Packages the GPU image lacks travel
# as wheels in .whl/ (soundfile, jiwer).
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=all
case "${1:-}" in
    --sweep) MODE=sweep; shift ;;
    --tiles) MODE=tiles; shift ;;
    --quick) MODE=quick; shift ;;
esac
OUT_DIR="${1:-${OUT:-/tmp/gpu_check}}"
DETAILED=/tmp/gpu_check_detailed  # packed into OUT_DIR/detailed.tgz (the device returns few files)
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/log.txt"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
export PYTHON=python3

step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "=== $name ($(date -u +%H:%M:%S))" | tee -a "$LOG"
    timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
    echo "=== $name exit ${PIPESTATUS[0]}" | tee -a "$LOG"
}

# The benchmark as the graders run it: the test clip, 13 tokens, full-size random weights.
BENCH_ARGS=(--random-weights --min-new-tokens 13 --max-new-tokens 13 --warmup 2 --runs 10)

bench() {  # bench FOLDER DTYPE [extra options]
    local folder=$1 dtype=$2
    shift 2
    step "bench $folder $dtype" 120 ./benchmark.sh "$folder" "${BENCH_ARGS[@]}" --dtype "$dtype" \
        --json "$OUT_DIR/bench_one.json" "$@" \
        && python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$OUT_DIR/bench_one.json" \
            >> "$OUT_DIR/bench.jsonl"
    rm -f "$OUT_DIR/bench_one.json"
}

detailed() {  # detailed DTYPE [extra options]
    local dtype=$1
    shift
    mkdir -p "$DETAILED/$dtype"
    step "detailed $dtype" 150 python3 benchmark_detailed.py glm_asr_triton_example --random-weights --dtype "$dtype" \
        --min-new-tokens 13 --max-new-tokens 13 --runs 5 --compare glm_asr_scratch \
        --json "$DETAILED/$dtype/detailed.json" --csv "$DETAILED/$dtype/kernels.csv" --plot "$DETAILED/$dtype" "$@"
    tar czf "$OUT_DIR/detailed.tgz" -C "$DETAILED" .
}

step machine 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader;
    python3 -c "import torch, triton, transformers; print(\"torch\", torch.__version__, \"triton\", triton.__version__, \"transformers\", transformers.__version__)"'
# Most important first: a lease that runs out still returns what the earlier steps wrote.
bench glm_asr_triton_example bfloat16
# The anchor for programmatic dependent launch: the same run with it switched off (log only).
step "bench glm_asr_triton_example bfloat16 without PDL" 120 env GLM_ASR_PDL=0 ./benchmark.sh glm_asr_triton_example \
    "${BENCH_ARGS[@]}" --dtype bfloat16
case "$MODE" in
    tiles)
        step parity 120 python3 utils/gpu_parity.py --tracks glm_asr_triton_example --dtypes bfloat16 \
            --json "$OUT_DIR/parity.jsonl"
        for dtype in bfloat16 float32; do
            step "sweep encoder $dtype" 200 python3 utils/sweep_linear.py --sections encoder --dtype "$dtype" \
                --json "$OUT_DIR/sweep_encoder_$dtype.json"
        done
        ;;
    quick)
        bench glm_asr_triton_example float32
        step parity 150 python3 utils/gpu_parity.py --tracks glm_asr_triton_example --json "$OUT_DIR/parity.jsonl"
        ;;
    *)
        step parity 200 python3 utils/gpu_parity.py --json "$OUT_DIR/parity.jsonl"
        # fp32 without TF32 anywhere: separates TF32 rounding from anything else (log only).
        step "parity fp32 ieee" 120 env GLM_ASR_FP32_PRECISION=ieee python3 utils/gpu_parity.py \
            --tracks glm_asr_triton_example --dtypes float32
        bench glm_asr_triton_example float32
        bench glm_asr_scratch bfloat16
        bench glm_asr_triton_template bfloat16 --allow-reference all
        step "fill template" 30 python3 utils/make_template.py --filled . --package glm_asr_triton_filled
        bench glm_asr_triton_filled bfloat16
        detailed bfloat16 --baseline hf
        detailed float32
        ;;
esac
step summary 30 python3 utils/gpu_summary.py "$OUT_DIR"
if [ "$MODE" = sweep ]; then
    step sweep 240 python3 utils/sweep_linear.py --json "$OUT_DIR/sweep.json"
fi
