#!/usr/bin/env bash
# Every GPU check in one call, ending with a short table:  bash utils/gpu_check.sh [OUT_DIR]
#
#   1. the machine: GPU, driver, torch / triton / transformers versions
#   2. ./benchmark.sh on the test clip, 13 tokens, random weights: Triton example bf16
#   3. full-size parity with transformers (random weights, identical for both), fp32 and bf16,
#      with transformers' own time per transcription as the speed anchor (utils/gpu_parity.py)
#   4. the same benchmark for the Triton example in fp32, scratch in bf16, and the Triton template
#      (--allow-reference all) when it exists
#   5. benchmark_detailed.py for the Triton example in bf16: components, kernels, roofline plots
#
# Each step has its own time limit and a failed step does not stop the next. Everything lands in
# OUT_DIR (default $OUT on the device machine): log.txt, parity.jsonl, bench.jsonl, detailed.json,
# the plots and summary.md. Packages the GPU image lacks travel as wheels in .whl/ (soundfile, jiwer).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-/tmp/gpu_check}}"
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

bench() {  # bench FOLDER DTYPE [extra options]
    local folder=$1 dtype=$2
    shift 2
    step "bench $folder $dtype" 120 ./benchmark.sh "$folder" --random-weights --min-new-tokens 13 --max-new-tokens 13 \
        --dtype "$dtype" --warmup 2 --runs 10 --json "$OUT_DIR/bench_one.json" "$@" \
        && python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$OUT_DIR/bench_one.json" \
            >> "$OUT_DIR/bench.jsonl"
    rm -f "$OUT_DIR/bench_one.json"
}

step machine 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader;
    python3 -c "import torch, triton, transformers; print(\"torch\", torch.__version__, \"triton\", triton.__version__, \"transformers\", transformers.__version__)"'
# Most important first: a lease that runs out still returns what the earlier steps wrote.
bench glm_asr_triton_example bfloat16
step parity 200 python3 utils/gpu_parity.py --json "$OUT_DIR/parity.jsonl"
bench glm_asr_triton_example float32
bench glm_asr_scratch bfloat16
if [ -f glm_asr_triton_template/model.py ]; then
    bench glm_asr_triton_template bfloat16 --allow-reference all
fi
step detailed 150 python3 benchmark_detailed.py glm_asr_triton_example --random-weights --dtype bfloat16 \
    --min-new-tokens 13 --max-new-tokens 13 --runs 5 --baseline hf --json "$OUT_DIR/detailed.json" --plot "$OUT_DIR"
step summary 30 python3 utils/gpu_summary.py "$OUT_DIR"
