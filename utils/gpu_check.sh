#!/usr/bin/env bash
# Every GPU check of the repository, in parts that each fit one device call; the summary table last.
#
#   bash utils/gpu_check.sh PART [PART...] [--out DIR] [--patch FILE] [--track FOLDER:PATH]       (default DIR: $OUT, else /tmp/gpu_check)
#
#   bench     ./benchmark.sh on the test clip, 13 tokens, full-size random weights: every folder and
#             path in bf16; the example paths in tf32 and IEEE fp32; the filled templates
#   parity    glm_asr_lab/gpu/parity.py, IEEE fp32: every track path's 30 greedy ids against transformers' true
#             fp32 on full-size random weights (equal, or it fails), with the prefill logits' error; the
#             compiled PyTorch path (glm_asr_scratch:compiled) in a step of its own (parity and regret)
#   regret    glm_asr_lab/gpu/parity.py, tf32 and bf16: every track path's teacher-forced regret against
#             transformers' true fp32, transformers' own tf32 / bf16 runs as the yardstick
#   clips     glm_asr_lab/gpu/clips.py: test clip, 0.3 s, 30.5 s, 45 s, 5 min, 44.1 kHz stereo: fp32 ids
#             against transformers, bf16 time, real-time factor, peak memory
#   kernels   the course path's self-checks on the GPU (the course kernels' and the glue's case table
#             with its model-size cases, timed; conv.py) of both tracks (cuTile for real where .cutile is
#             carried), the planted TF32 bug, caught by the GPU's own TF32, and the cuTile emulator's
#             semantics tests run against the real cuda.tile
#   robust    the fast paths' self-checks and kernel tests, tiny checkpoints of awkward shapes end to
#             end, and the bad-input cases of the command line
#   detailed  benchmark_detailed.py (fast path vs course path, bf16, with plots; the attention and linear
#             micro-benchmarks) and the grader's report: ./benchmark.sh on the filled Triton template with --compare
#   grade     the class grader (./benchmark.sh --grade) on a synthetic Triton class (grade_cutile: a cuTile one)
#             (glm_asr_lab/synthetic_class.py: correct, a subtly wrong kernel, a TODO, a crash at import, one
#             printing megabytes, and the six cheats, each to be TAMPERED): GPU workers, CUDA-event timing,
#             the grader's clock and tripwires, the GPU health check, the tables; verdicts_TRACK.txt
#   fastpath  the fast paths against their floor, each other and transformers (docs/performance.md, "Both
#             fast paths to the speed of light"): measured peaks and floors, end to end per path and precision
#             (glm_asr_lab/gpu/fastpath.py), the best plain PyTorch (glm_asr_scratch:compiled) in bf16 and tf32,
#             the components in bf16 and the kernels alone (benchmark_detailed.py), the Triton fast path in IEEE
#             fp32 kernel by kernel, transformers eager and compiled; fastpath.jsonl and fastpath/*.json, the
#             table in summary.md. About 3.5 minutes on an H100 before the compiled PyTorch path's two steps
#             (mostly compilation; each at most 200 s)
#   tune      glm_asr_lab/tuning/tune_random_init.py (the scales of the random weights)
#   sweep     the decode step's tiles: glm_asr_lab/tuning/sweep_linear.py (Triton's one-row launches, the
#             CUDA-core GEMV against tensor-core tiles) and sweep_cutile_fast.py (cuTile's GEMVs on weights
#             that miss L2, its decode attention's split size, its linear launches under compiler hints)
#   sweep_gemm  glm_asr_lab/tuning/sweep_linear.py's prefill and encoder GEMM tiles
#   sweep_step  glm_asr_lab/tuning/sweep_step.py: the Triton fast path's one-row GEMV tiles timed inside the
#             decode step (its CUDA graph replayed back to back), each launch in turn, then the winners together
#             against the table; sweep_step.jsonl and the GEMV_TILES_BY_GPU row they make (about 5 min on an H100)
#   sweep_attention  glm_asr_lab/tuning/sweep_attention.py: Triton's flash attention tiles (encoder, prefill)
#             and decode attention's split and tiles (about 5 min)
#   ab_hints  glm_asr_lab/tuning/ab_hints.py: cuTile's candidate compiler hints and wide tiles on whole
#             transcriptions (the test clip, the 45 s and the 5-minute clips, arms in A B B A order, a hint's
#             ids held to the table's)
#   ab_patch  glm_asr_lab/tuning/ab_patch.py: a code change on one machine, the tree against a copy with the
#             change reverted (--patch FILE, default ab.patch at the repository root: `git diff BEFORE AFTER`;
#             --track FOLDER:PATH, default the cuTile fast path; the test clip, three rounds, each tree in turns)
#   long_clips  where the time of the long clips goes, both fast paths side by side (benchmark_detailed.py
#             --compare on the 45 s and 5-minute clips of glm_asr_lab/gpu/clips.py, bf16, 13 tokens): components
#             and kernel classes, long_clips/*.json, the largest gaps in summary.md (about 2 min on an H100)
#   sweep_long  where long_clips found cuTile slowest: its encoder GEMMs over 1, 2 and 10 windows, the table's
#             launch and each tile under each compiler hint; its LayerNorm and RMSNorm by rows a block and
#             occupancy (about 4 min on an H100)
#   persistent_chain  glm_asr_lab/measure/persistent_chain.py: the decode step's weight stream (28 layers' four
#             GEMVs and lm_head) as a launch per GEMV (the fast path's launcher) against one persistent launch
#             with grid barriers, several tiles, against the copy floor; persistent_chain.jsonl (about 1 min)
#   timeline  the decode step launch by launch, both fast paths, with and without programmatic
#             dependent launch (about 2 min)
#   all       bench parity regret clips kernels robust detailed grade grade_cutile
#
# Each step has its own time limit and a failed step does not stop the next. Everything lands in the
# output folder: log.txt, bench.jsonl, parity.jsonl, clips.jsonl, summary.md and detailed.tgz (JSON,
# CSV, plots, the compare report). Packages the GPU image lacks travel as wheels in .whl/ (soundfile,
# cffi, pycparser); the cuTile compiler as .cutile/ (../shared/tools/CUTILE_ON_DEVICE.md).
set -uo pipefail
cd "$(dirname "$0")/.."
PARTS=()
OUT_DIR="${OUT:-/tmp/gpu_check}"
PATCH_FILE=ab.patch
AB_TRACK=()
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT_DIR=$2; shift 2 ;;
        --patch) PATCH_FILE=$2; shift 2 ;;
        --track) AB_TRACK=(--track "$2"); shift 2 ;;
        all) PARTS+=(bench parity regret clips kernels robust detailed grade grade_cutile); shift ;;
        bench|parity|regret|clips|kernels|robust|detailed|grade|grade_cutile|fastpath|long_clips|sweep_long|timeline|tune|sweep|sweep_gemm|sweep_step|sweep_attention|ab_hints|ab_patch|persistent_chain) PARTS+=("$1"); shift ;;
        *) echo "usage: bash utils/gpu_check.sh PART... [--out DIR] [--patch FILE] [--track FOLDER:PATH]; parts: bench parity regret clips kernels robust detailed grade grade_cutile fastpath long_clips sweep_long timeline tune sweep sweep_gemm sweep_step sweep_attention ab_hints ab_patch persistent_chain all" >&2
           exit 2 ;;
    esac
done
[ ${#PARTS[@]} -gt 0 ] || { echo "usage: bash utils/gpu_check.sh PART... [--out DIR] [--patch FILE] [--track FOLDER:PATH] (see the top of this file)" >&2; exit 2; }
DETAILED=/tmp/gpu_check_detailed  # packed into OUT_DIR/detailed.tgz (the device returns few files)
mkdir -p "$OUT_DIR" "$DETAILED"
LOG="$OUT_DIR/log.txt"
export PYTHONUNBUFFERED=1 PYTHON=python3
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi
if [ -f .cutile/activate.sh ]; then
    source .cutile/activate.sh
fi
# The GPU image's own Python runs the repository uninstalled (an offline machine cannot build the
# editable install), so the repository root goes on its path here, for every step and subprocess.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "=== $name ($(date -u +%H:%M:%S))" | tee -a "$LOG"
    timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
    echo "=== $name exit ${PIPESTATUS[0]}" | tee -a "$LOG"
}

# One line a student of a graded class: status, correctness, time, the grader's own clock, the note.
VERDICTS='import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    student, status, correctness, ms, clock, note = (row[key] for key in (
        "student", "status", "correctness", "time_ms", "grader_clock_ms", "note"))
    clock = clock or "-"
    print(f"{student:13} {status:9} {correctness:5} {ms:>8} ms (grader clock {clock}) {note[:240]}")'

# The benchmark as the graders run it: the test clip, 13 tokens, full-size random weights.
BENCH_ARGS=(--random-weights --min-new-tokens 13 --max-new-tokens 13 --warmup 2 --runs 10)

bench() {  # bench FOLDER PATH PRECISION [extra options]
    local folder=$1 path=$2 precision=$3
    shift 3
    step "bench $folder $path $precision $*" 150 ./benchmark.sh "$folder" "${BENCH_ARGS[@]}" --path "$path" \
        --precision "$precision" --json "$OUT_DIR/bench_one.json" "$@" \
        && python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$OUT_DIR/bench_one.json" \
            >> "$OUT_DIR/bench.jsonl"
    rm -f "$OUT_DIR/bench_one.json"
}

# The best plain PyTorch, which every fast path must beat: glm_asr_scratch:compiled (static KV cache, CUDA
# graphs, torch.compile of the layers). Its first call compiles and autotunes (first_call_ms in fastpath.jsonl;
# not yet measured at full size): one step a precision, so a compilation that fails or overruns loses only
# its own figure.
compiled_pytorch() {  # compiled_pytorch PRECISION
    step "fastpath: PyTorch compiled (glm_asr_scratch:compiled), $1" 200 python3 -m glm_asr_lab.gpu.fastpath \
        --timings "glm_asr_scratch:compiled@$1" --jsonl "$OUT_DIR/fastpath.jsonl"
}

has_cutile() { [ -f glm_asr_cutile_example/model.py ] && python3 -c "import cuda.tile" 2>/dev/null; }
track_paths() {  # the folder:path pairs of every folder that runs here
    local tracks="glm_asr_scratch:course,glm_asr_triton_example:fast,glm_asr_triton_example:course"
    if has_cutile; then
        tracks="$tracks,glm_asr_cutile_example:fast,glm_asr_cutile_example:course"
    fi
    echo "$tracks"
}

step machine 60 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader;
    python3 -c "import torch, triton, transformers; print(\"torch\", torch.__version__, \"triton\", triton.__version__, \"transformers\", transformers.__version__)";
    python3 -c "import cuda.tile, cupy; print(\"cuda.tile\", cuda.tile.__version__, \"cupy\", cupy.__version__)" 2>&1 | tail -1'

for part in "${PARTS[@]}"; do
    case "$part" in
        bench)
            python3 -m glm_asr_lab.make_template --filled . --package glm_asr_triton_filled >/dev/null
            bench glm_asr_triton_example fast bf16
            bench glm_asr_triton_example course bf16
            bench glm_asr_triton_filled course bf16
            bench glm_asr_triton_example fast tf32
            bench glm_asr_triton_example course tf32
            bench glm_asr_triton_example fast fp32
            bench glm_asr_scratch course bf16
            bench glm_asr_triton_template course bf16 --allow-reference all
            if has_cutile; then
                python3 -m glm_asr_lab.make_template --track cutile --filled . --package glm_asr_cutile_filled >/dev/null
                bench glm_asr_cutile_example fast bf16
                bench glm_asr_cutile_example course bf16
                bench glm_asr_cutile_example cupy tf32
                bench glm_asr_cutile_filled course bf16
                bench glm_asr_cutile_example fast tf32
                bench glm_asr_cutile_example course tf32
            fi
            ;;
        parity|regret)
            # One precision set a call: the three precisions of five paths take longer than a device call.
            precisions=fp32
            [ "$part" = regret ] && precisions=tf32,bf16
            step "$part ($precisions)" 560 python3 -m glm_asr_lab.gpu.parity --tracks "$(track_paths)" \
                --precisions "$precisions" --json "$OUT_DIR/parity_$part.jsonl"
            # The compiled PyTorch path in a step of its own: its first call in each precision compiles and
            # autotunes, and a compilation that fails or overruns loses only this step.
            limit=300
            [ "$part" = regret ] && limit=360  # two precisions, two compilations
            step "$part ($precisions), glm_asr_scratch:compiled" $limit python3 -m glm_asr_lab.gpu.parity \
                --tracks glm_asr_scratch:compiled --precisions "$precisions" --json "$OUT_DIR/parity_${part}_compiled.jsonl"
            cat "$OUT_DIR"/parity_parity.jsonl "$OUT_DIR"/parity_parity_compiled.jsonl "$OUT_DIR"/parity_regret.jsonl \
                "$OUT_DIR"/parity_regret_compiled.jsonl > "$OUT_DIR/parity.jsonl" 2>/dev/null
            ;;
        clips)
            # Every kernel path on the short and odd clips; the 5 minute clip (ten windows, a 3765-token
            # prompt) on the fast paths only: IEEE-fp32 runs of ten windows take minutes.
            step clips 400 python3 -m glm_asr_lab.gpu.clips --tracks "$(track_paths | cut -d, -f2-)" \
                --clips "test clip 3.5 s,0.3 s,30.5 s,45 s,44.1 kHz stereo" --json "$OUT_DIR/clips_short.jsonl"
            step "clips (5 min)" 400 python3 -m glm_asr_lab.gpu.clips --tracks "$(track_paths | tr , '\n' | grep :fast | paste -sd,)" \
                --clips "5 min" --json "$OUT_DIR/clips_long.jsonl"
            cat "$OUT_DIR"/clips_short.jsonl "$OUT_DIR"/clips_long.jsonl > "$OUT_DIR/clips.jsonl" 2>/dev/null
            ;;
        kernels)
            for track in triton $(has_cutile && echo cutile); do
                for file in layers attention rope glue conv; do
                    step "self-check glm_asr_${track}_example/$file.py" 180 python3 "glm_asr_${track}_example/$file.py"
                done
            done
            # The planted bug whose CPU catch rests on the interpreter's TF32 rounding, caught by the GPU's own.
            step "planted TF32 bug, caught on the GPU" 300 python3 -m pytest -q tests/test_planted_bugs.py \
                -k input_precision -p no:cacheprovider
            # The cuTile semantics the emulator models (tests/test_cutile_emulator.py), against the real cuda.tile.
            if has_cutile; then
                step "cuTile semantics, the emulator's tests on the GPU" 200 python3 -m pytest -q \
                    tests/test_cutile_emulator.py -p no:cacheprovider
            fi
            ;;
        robust)
            for track in triton $(has_cutile && echo cutile); do
                for file in fast_linear fast_attention fast_rope fast_head; do
                    # Run as modules: the fast-path files import their neighbours relatively.
                    step "self-check glm_asr_${track}_example/$file.py" 120 python3 -m "glm_asr_${track}_example.$file"
                done
            done
            step "kernel tests (Triton fast path)" 300 python3 -m pytest -q -x tests/test_triton_layers.py \
                tests/test_triton_attention.py -p no:cacheprovider
            step "awkward checkpoints end to end" 300 python3 -m pytest -q tests/test_awkward_shapes.py -p no:cacheprovider
            step "bad input" 200 python3 -m glm_asr_lab.gpu.bad_inputs --tracks "$(track_paths)"
            ;;
        detailed)
            mkdir -p "$DETAILED/bf16"
            step "detailed bf16" 300 python3 benchmark_detailed.py glm_asr_triton_example --random-weights --precision bf16 \
                --path fast --min-new-tokens 13 --max-new-tokens 13 --runs 5 --compare glm_asr_triton_example:course \
                --json "$DETAILED/bf16/detailed.json" --csv "$DETAILED/bf16/kernels.csv" --plot "$DETAILED/bf16"
            step "micro-benchmarks bf16" 200 python3 benchmark_detailed.py glm_asr_triton_example \
                $(has_cutile && echo --compare glm_asr_cutile_example) --random-weights \
                --precision bf16 --attention-only --linear-only --json "$DETAILED/bf16/micro.json"
            python3 -m glm_asr_lab.make_template --filled . --package glm_asr_triton_filled >/dev/null
            step "compare report (filled template)" 300 ./benchmark.sh glm_asr_triton_filled --random-weights --precision bf16 \
                --min-new-tokens 13 --max-new-tokens 13 --runs 5 --compare --report "$DETAILED/report"
            tar czf "$OUT_DIR/detailed.tgz" -C "$DETAILED" .
            ;;
        grade|grade_cutile)
            # About 26 s a worker on an H200 (2026-11-26: 3.5 min for five kinds and three baselines): the tiny checkpoint in
            # IEEE fp32 (ids held to transformers'), 8 tokens, the cases of the two kernels the class gets
            # wrong (model-size ones included). Each worker compiles its kernels afresh (its own Triton
            # cache): that is most of its time. The cheat kinds (docs/grading_integrity.md) must each be
            # TAMPERED, the honest ones not; verdicts.txt has every row's status, correctness and note.
            python3 -m glm_asr_course.reference.tiny_checkpoint /tmp/gpu_check_tiny >/dev/null
            kinds=correct,wrong,todo,crash,chatty,$(python3 -c "from glm_asr_lab.synthetic_class import CHEATS; print(','.join(CHEATS))")
            # One track a part: eleven kinds and three baselines take most of a device call's ten minutes.
            track=triton
            [ "$part" = grade_cutile ] && track=cutile
            if [ "$track" = triton ] || has_cutile; then
                class=/tmp/gpu_check_class/$track
                rm -rf "$class"
                python3 -m glm_asr_lab.synthetic_class "$class/submissions" --track "$track" --kinds "$kinds" >/dev/null
                step "grade a synthetic $track class" 570 ./benchmark.sh --grade "$class/submissions" \
                    --out "$class/grading" --model /tmp/gpu_check_tiny --precision fp32 --max-new-tokens 8 \
                    --cases gelu_kernel,silu_kernel --time-limit 200
                step "verdicts of the $track class" 30 python3 -c "$VERDICTS" "$class/grading/grades.csv" \
                    | tee "$OUT_DIR/verdicts_$track.txt"
                cp "$class/grading/grades.md" "$OUT_DIR/grades_$track.md" 2>/dev/null
                cp "$class/grading/grades.csv" "$OUT_DIR/grades_$track.csv" 2>/dev/null
                cp "$class/grading/times.png" "$OUT_DIR/times_$track.png" 2>/dev/null
            fi
            ;;
        fastpath)
            # Each step keeps to its own limit (about 500 s in all) and writes as it goes: a step that runs out
            # loses only its own last result. Most wanted first, in each step and across them.
            mkdir -p "$OUT_DIR/fastpath"
            triton=glm_asr_triton_example
            timings="$triton:fast@bf16,$triton:fast@tf32"
            detailed_args=(--random-weights --min-new-tokens 13 --max-new-tokens 13)
            micro_tracks=()
            if has_cutile; then
                timings="$triton:fast@bf16,glm_asr_cutile_example:fast@bf16,$triton:fast@tf32,glm_asr_cutile_example:fast@tf32"
                micro_tracks=(--compare glm_asr_cutile_example)
            fi
            timings="$timings,$triton:fast@fp32,$triton:course@fp32,$triton:course@bf16,$triton:course@tf32"
            step "fastpath: peaks, floors, end to end" 200 python3 -m glm_asr_lab.gpu.fastpath --peaks --timings "$timings" \
                --jsonl "$OUT_DIR/fastpath.jsonl"
            compiled_pytorch bf16
            step "fastpath: Triton fast path, bf16, components" 50 python3 benchmark_detailed.py $triton --path fast \
                --precision bf16 "${detailed_args[@]}" --warmup 1 --runs 3 --json "$OUT_DIR/fastpath/components_triton.json"
            if has_cutile; then
                step "fastpath: cuTile fast path, bf16, components" 50 python3 benchmark_detailed.py glm_asr_cutile_example \
                    --path fast --precision bf16 "${detailed_args[@]}" --warmup 1 --runs 3 \
                    --json "$OUT_DIR/fastpath/components_cutile.json"
            fi
            step "fastpath: kernels alone, bf16" 50 python3 benchmark_detailed.py $triton "${micro_tracks[@]}" \
                --random-weights --precision bf16 --attention-only --linear-only --json "$OUT_DIR/fastpath/micro.json"
            step "fastpath: Triton fast path, IEEE fp32, kernel by kernel" 45 python3 benchmark_detailed.py $triton \
                --path fast --precision fp32 "${detailed_args[@]}" --warmup 1 --runs 1 --top 15 \
                --json "$OUT_DIR/fastpath/ieee.json"
            # transformers' compiled decode step: its first call compiles (timed alone) and captures the step's
            # CUDA graph; eager first, so a compilation that overruns the limit loses only itself.
            step "fastpath: transformers, bf16" 100 python3 -m glm_asr_lab.gpu.fastpath --anchors eager,compiled \
                --warmup 1 --runs 5 --jsonl "$OUT_DIR/fastpath.jsonl"
            compiled_pytorch tf32
            ;;
        long_clips)
            # The fast paths' gap grows with the clip (2026-11-27 c: cuTile 1.09x Triton on the test clip, 1.44x
            # on 45 s, 1.40x on 5 minutes): component by component and kernel class by kernel class, where.
            # A reused --out keeps no stale report: summary.md reads whatever long_clips/ holds.
            mkdir -p "$OUT_DIR/long_clips"
            rm -f "$OUT_DIR"/long_clips/*.json
            compare=()
            if has_cutile; then
                compare=(--compare glm_asr_cutile_example:fast)
            fi
            # The clip files as a step of their own, so a failure to write them shows in log.txt and the table.
            clip_list=/tmp/gpu_check_clips.tsv
            rm -f "$clip_list"
            step "long clips: the clip files" 60 python3 -m glm_asr_lab.gpu.clips --write /tmp/gpu_check_clips \
                --clips "45 s,5 min" --list "$clip_list"
            # The list on fd 3: a step reading stdin cannot swallow the next clip's line.
            if [ -s "$clip_list" ]; then
                while IFS=$'\t' read -r name file <&3; do
                    step "long clips: $name, fast paths, bf16" 200 python3 benchmark_detailed.py \
                        glm_asr_triton_example --path fast "${compare[@]}" --precision bf16 --random-weights \
                        --audio "$file" --min-new-tokens 13 --max-new-tokens 13 --warmup 1 --runs 3 --top 12 \
                        --json "$OUT_DIR/long_clips/${name// /_}.json"
                done 3< "$clip_list"
            fi
            ;;
        timeline)
            # The decode step launch by launch (benchmark_detailed.py's "Decode step, launch by launch"): both
            # fast paths in bf16, each with and without programmatic dependent launch; without it the drain
            # between kernels shows as idle time.
            mkdir -p "$OUT_DIR/timeline"
            for track in triton $(has_cutile && echo cutile); do
                for pdl in 1 0; do
                    step "timeline: $track fast path, bf16, GLM_ASR_PDL=$pdl" 90 env GLM_ASR_PDL=$pdl python3 \
                        benchmark_detailed.py "glm_asr_${track}_example" --path fast --precision bf16 --random-weights \
                        --min-new-tokens 13 --max-new-tokens 13 --warmup 1 --runs 3 --top 12 \
                        --json "$OUT_DIR/timeline/${track}_pdl$pdl.json"
                done
            done
            ;;
        tune)
            step "tune random init" 560 python3 -m glm_asr_lab.tuning.tune_random_init --json "$OUT_DIR/tune.json"
            ;;
        sweep)
            # One row of decode: Triton's CUDA-core GEMV against 16-row tensor-core tiles (plain loads with
            # split K, or TMA); the cuTile GEMV's tiles and its decode attention's split size; cuTile's
            # linear launches under each compiler hint (KERNEL_HINTS_BY_GPU).
            step "sweep: Triton decode, one row" 200 python3 -m glm_asr_lab.tuning.sweep_linear --sections decode \
                --decode-kinds gemv,gemm,tma --json "$OUT_DIR/sweep_decode.json"
            if has_cutile; then
                step "sweep: cuTile decode" 300 python3 -m glm_asr_lab.tuning.sweep_cutile_fast --only gemv,decode
                step "sweep: cuTile compiler hints" 200 python3 -m glm_asr_lab.tuning.sweep_cutile_fast --only hints
            fi
            ;;
        sweep_long)
            # Where long_clips found cuTile slowest against Triton (2026-11-27 d, ten windows): the encoder's
            # GEMMs (tiles x hints) and the norms (rows a block x occupancy).
            if has_cutile; then
                step "sweep: cuTile encoder GEMMs over 1, 2 and 10 windows" 330 python3 -m glm_asr_lab.tuning.sweep_cutile_fast \
                    --only long_gemm
                step "sweep: cuTile LayerNorm and RMSNorm by rows" 200 python3 -m glm_asr_lab.tuning.sweep_cutile_fast \
                    --only norm
            fi
            ;;
        sweep_gemm)
            step "sweep: Triton prefill and encoder GEMMs" 560 python3 -m glm_asr_lab.tuning.sweep_linear \
                --sections prefill,encoder --json "$OUT_DIR/sweep_gemm.json"
            ;;
        sweep_step)
            step "sweep: Triton decode GEMV tiles inside the step" 560 python3 -m glm_asr_lab.tuning.sweep_step \
                --jsonl "$OUT_DIR/sweep_step.jsonl"
            ;;
        ab_hints)
            if has_cutile; then
                step "A/B: cuTile's candidate hints and wide tiles" 560 python3 -m glm_asr_lab.tuning.ab_hints \
                    --jsonl "$OUT_DIR/ab_hints.jsonl"
            fi
            ;;
        ab_patch)
            # The default track is cuTile's fast path; a track given with --track imports only its own language.
            if has_cutile || { [ ${#AB_TRACK[@]} -gt 0 ] && [[ ${AB_TRACK[1]} != glm_asr_cutile* ]]; }; then
                step "A/B: the change in $PATCH_FILE against the tree without it" 560 python3 -m glm_asr_lab.tuning.ab_patch \
                    "$PATCH_FILE" "${AB_TRACK[@]}" --jsonl "$OUT_DIR/ab_patch.jsonl"
            fi
            ;;
        persistent_chain)
            step "probe: the decode step's GEMVs, a launch each against one persistent launch" 300 \
                python3 -m glm_asr_lab.measure.persistent_chain --jsonl "$OUT_DIR/persistent_chain.jsonl"
            ;;
        sweep_attention)
            step "sweep: Triton flash and decode attention" 560 python3 -m glm_asr_lab.tuning.sweep_attention \
                --json "$OUT_DIR/sweep_attention.json"
            ;;
    esac
done
step summary 60 python3 -m glm_asr_lab.gpu.summary "$OUT_DIR"
