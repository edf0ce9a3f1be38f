"""How the tracks' kernels run: cuTile through the real cuda.tile on a GPU or a CPU emulator of it
elsewhere (cutile, cutile_emulator); Triton on a GPU as it is, and in its CPU interpreter with the
fixes the course's kernels need (triton_interpreter).
"""
