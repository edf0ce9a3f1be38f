# Set up (once) and activate the cuTile track's environment:   source utils/setup-cutile.sh
# The Triton track's environment first (utils/setup-triton.sh: the same .venv, torch and the shared
# packages), then requirements-cutile.txt: cuda.tile and its compiler (tileiras, ptxas and libnvvm,
# 13.4.92). Where an NVIDIA driver answers (nvidia-smi), also requirements-cutile-gpu.txt: CuPy for
# the CUDA major version torch was built with. Re-sourcing is quick: the packages are reinstalled only
# when those files (or that CUDA version) change. Without a GPU, cuTile kernels run in the CPU emulator
# (glm_asr_common/runtimes/cutile_emulator.py) and the compiler serves utils/cutile_compile_check.py.
source "$(dirname "${BASH_SOURCE[0]}")/setup-triton.sh"
# (The function's failures are returned explicitly: inside an `if` condition, set -e is ignored.)
_glm_cutile_setup() {
    local python="$_glm_venv/bin/python" stamp="$_glm_venv/.glm_asr_cutile_requirements" wanted
    local gpu_requirements=()
    wanted="$(cat "$_glm_root/requirements-cutile.txt")" || return 1
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
        export GLM_ASR_CUDA_MAJOR
        GLM_ASR_CUDA_MAJOR="$("$python" -c 'import torch; print((torch.version.cuda or "").split(".")[0])')" || return 1
        [ -n "$GLM_ASR_CUDA_MAJOR" ] || { echo "torch in $_glm_venv is not a CUDA build" >&2; return 1; }
        gpu_requirements=(-r "$_glm_root/requirements-cutile-gpu.txt")
        wanted="$wanted
CUDA $GLM_ASR_CUDA_MAJOR
$(cat "$_glm_root/requirements-cutile-gpu.txt")"
    fi
    if [ "$wanted" != "$(cat "$stamp" 2>/dev/null)" ]; then
        echo "Installing the cuTile packages into $_glm_venv..."
        "$python" -m pip install -q -r "$_glm_root/requirements-cutile.txt" "${gpu_requirements[@]}" || return 1
        printf '%s' "$wanted" >"$stamp"
    fi
}
if [ -n "${VIRTUAL_ENV:-}" ] && ( _glm_cutile_setup ); then
    echo "cuTile environment ready: $(cd "$_glm_root" && python -c 'import cuda.tile as ct
from glm_asr_common.runtimes.cutile import MODE
where = "on the GPU" if MODE == "gpu" else "in the CPU emulator (the compiler serves utils/cutile_compile_check.py)"
print(f"cuda.tile {ct.__version__}, kernels run {where}")')"
else
    echo "error: cuTile environment setup failed (see above)" >&2
fi
unset -f _glm_cutile_setup
