"""How many blocks of a compiled kernel fit one SM of sm_90 (the H100 and the H200), from what its code takes."""

REGISTERS, SHARED_BYTES, THREADS, BLOCKS = 65536, 228 * 1024, 2048, 32  # one SM's
RESERVED_BYTES = 1024  # the shared memory each block reserves for the system (.nv.reservedSmem)
REGISTER_UNIT = 256  # a warp's registers are allocated in units of this many


def blocks_an_sm(registers: int, threads: int, shared_bytes: int) -> int:
    """Blocks of ``threads`` threads, ``registers`` a thread and ``shared_bytes`` a block (the reservation
    included) that one SM holds at once."""
    registers_a_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return min(BLOCKS, REGISTERS // (registers_a_warp * (threads // 32)), THREADS // threads,
               SHARED_BYTES // shared_bytes if shared_bytes else BLOCKS)
