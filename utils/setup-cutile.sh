# Set up (once) and activate the cuTile track's environment:   source utils/setup-cutile.sh
# The Triton track's environment first (utils/setup-triton.sh: the same .venv and packages), then the
# cutile extra of pyproject.toml: cuda.tile and its compiler (tileiras, ptxas and libnvvm, 13.4.92).
# Where an NVIDIA driver answers (nvidia-smi), also CuPy for the CUDA major version torch was built
# with (the cuda12 or cuda13 extra). Re-sourcing is quick: packages are reinstalled only when
# pyproject.toml (or that CUDA version) changes. Without a GPU, cuTile kernels run in the CPU emulator
# (the cutile_emulator package) and the compiler serves python -m glm_asr_lab.cutile_compile_check.
source "$(dirname "${BASH_SOURCE[0]}")/setup-triton.sh"
# (The function's failures are returned explicitly: inside an `if` condition, set -e is ignored.)
_glm_cutile_setup() {
    local python="$_glm_venv/bin/python" stamp="$_glm_venv/.glm_asr_cutile_pyproject" extras="cutile" wanted cuda
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
        cuda="$("$python" -c 'import torch; print((torch.version.cuda or "").split(".")[0])')" || return 1
        [ -n "$cuda" ] || { echo "torch in $_glm_venv is not a CUDA build" >&2; return 1; }
        extras="cutile,cuda$cuda"
    fi
    wanted="$extras
$(cat "$_glm_root/pyproject.toml")" || return 1
    if [ "$wanted" != "$(cat "$stamp" 2>/dev/null)" ]; then
        echo "Installing the cuTile packages into $_glm_venv..."
        "$python" -m pip install -q -e "$_glm_root[demo,lab,test,$extras]" || return 1
        printf '%s' "$wanted" >"$stamp"
    fi
}
if [ -n "${VIRTUAL_ENV:-}" ] && ( _glm_cutile_setup ); then
    echo "cuTile environment ready: $(cd "$_glm_root" && python -c 'import cuda.tile as ct
from glm_asr_course.runtimes.cutile import MODE
where = "on the GPU" if MODE == "gpu" else "in the CPU emulator (the compiler serves python -m glm_asr_lab.cutile_compile_check)"
print(f"cuda.tile {ct.__version__}, kernels run {where}")')"
else
    echo "error: cuTile environment setup failed (see above)" >&2
fi
unset -f _glm_cutile_setup
