"""How cuTile code runs: the real cuda.tile on a GPU, a CPU emulator of it elsewhere.
"""
