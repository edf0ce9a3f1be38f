"""A CPU emulator of cuda.tile (emulator.py), so cuTile kernels run and are tested without a GPU. It
imports neither the course nor the lab."""
