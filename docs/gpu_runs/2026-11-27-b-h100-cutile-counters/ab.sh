#!/usr/bin/env bash
# A/B of cuTile's decode counters before the PDL wait: each arm's fast_attention.py and fast_rope.py in place, on the test clip and the 5-minute clip.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
source .cutile/activate.sh
mkdir -p $OUT/ab /tmp/clips
python3 -c "from pathlib import Path; from glm_asr_lab.gpu.clips import write_clips; print(write_clips(Path('/tmp/clips')))"
for clip in test five; do
  for arm in "$@"; do
    audio=""; [ $clip = five ] && audio="--audio /tmp/clips/clip4.wav"
    echo "=== $clip arm $arm ($(date -u +%H:%M:%S))" | tee -a $OUT/log.txt
    cp .ab/ctr/$arm/*.py glm_asr_cutile_example/
    timeout 150 python3 benchmark_detailed.py glm_asr_cutile_example --path fast --precision bf16 --random-weights \
        $audio --min-new-tokens 13 --max-new-tokens 13 --warmup 1 --runs 3 --top 14 \
        --json $OUT/ab/${clip}_$arm.json > $OUT/ab/${clip}_$arm.txt 2>&1
    echo "exit $?" | tee -a $OUT/log.txt
    grep -E "ms median|^encoder|^prefill|decode step|span " $OUT/ab/${clip}_$arm.txt | head -8 | tee -a $OUT/log.txt
  done
done
cp .ab/ctr/after/*.py glm_asr_cutile_example/
python3 - $OUT/ab "$@" <<'PY'
import json, sys
folder, arms = sys.argv[1], sys.argv[2:]
for clip in ("test", "five"):
    ids = {arm: json.load(open(f"{folder}/{clip}_{arm}.json"))["token_ids"] for arm in arms}
    print(clip, "token ids equal across arms:", all(ids[a] == ids[arms[0]] for a in arms), ids[arms[0]])
PY
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
