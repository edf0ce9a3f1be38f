#!/usr/bin/env bash
# The Triton course path's bf16 same-context regret with the course kernels' fp32 divisions rounded to
# nearest (divrn), and also with libdevice's exp (exact), against the kernels as they are (base).
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $OUT/log.txt
for arm in "$@"; do
    echo "=== arm $arm ($(date -u +%H:%M:%S))" | tee -a $OUT/log.txt
    cp .ab/course/$arm/*.py glm_asr_triton_example/
    timeout 200 python3 -m glm_asr_lab.gpu.parity --tracks glm_asr_triton_example:course --precisions bf16 \
        --json $OUT/regret_$arm.jsonl 2>&1 | tee -a $OUT/log.txt | grep -E "PASS|FAIL|regret|Error"
    echo "exit ${PIPESTATUS[0]}" | tee -a $OUT/log.txt
done
cp .ab/course/base/*.py glm_asr_triton_example/
