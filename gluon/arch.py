"""GPU architectures as data: what each can do and how much of each resource a block gets.

The DSL asks `arch.supports(op)` at trace time (so `wgmma()` in an SM80 kernel fails on the user's
line), the passes read the limits (shared memory, registers, threads), and the backend reads
`target` to pick Triton's compiler. The hardware's TMA box rules live here too, stated once for the
layout pass, the lowering and the runtime.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Op families. The DSL gates each builtin on one of these names.
COMMON_OPS = frozenset({
    "program_id", "arith", "load", "store", "atomic", "smem", "reduce", "convert_layout", "thread_barrier",
    "inline_asm",
})
# named_barrier: bar.sync / bar.arrive with a barrier id and a thread count (every NVIDIA arch here has them);
# ptx: inline PTX (the templates of gl.nvidia.ptx)
NV_SM80_OPS = frozenset({"mma", "cp_async", "ldmatrix", "named_barrier", "ptx"})
# griddep: programmatic dependent launch (griddepcontrol.wait / .launch_dependents)
NV_SM90_OPS = frozenset({"wgmma", "tma", "mbarrier", "cluster", "setmaxnreg", "warp_specialize", "griddep"})
NV_SM100_OPS = frozenset({"tcgen05", "tmem"})


@dataclass(frozen=True)
class Arch:
    name: str                      # "sm90"
    vendor: str                    # "nvidia" | "amd"
    backend: str                   # triton backend: "cuda" | "hip"
    version: int | str             # 90 | "gfx942"
    warp_size: int
    smem_per_block: int            # bytes without opt-in
    smem_per_block_max: int        # bytes with opt-in (what a kernel may really use)
    regs_per_block: int            # 32-bit registers in the register file of one SM
    max_regs_per_thread: int
    max_threads_per_block: int
    sm_count_hint: int             # a typical part's SM/CU count (the real count comes from the device)
    ops: frozenset = field(default_factory=frozenset)

    @property
    def target(self) -> tuple:
        """Triton target triple: (backend, arch, warp size)."""
        return (self.backend, self.version, self.warp_size)

    @property
    def target_string(self) -> str:
        return f"{self.backend}:{self.version}"

    def supports(self, op_family: str) -> bool:
        return op_family in self.ops

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name.upper()


SM80 = Arch("sm80", "nvidia", "cuda", 80, 32, 48 * 1024, 163 * 1024, 65536, 255, 1024, 108,
            COMMON_OPS | NV_SM80_OPS)
SM90 = Arch("sm90", "nvidia", "cuda", 90, 32, 48 * 1024, 227 * 1024, 65536, 255, 1024, 132,
            COMMON_OPS | NV_SM80_OPS | NV_SM90_OPS)
# Blackwell datacenter parts keep TMA/mbarriers/clusters but replace WGMMA by tcgen05 + TMEM.
SM100 = Arch("sm100", "nvidia", "cuda", 100, 32, 48 * 1024, 227 * 1024, 65536, 255, 1024, 148,
             COMMON_OPS | NV_SM80_OPS | (NV_SM90_OPS - {"wgmma"}) | NV_SM100_OPS)
CDNA3 = Arch("cdna3", "amd", "hip", "gfx942", 64, 64 * 1024, 64 * 1024, 512 * 64 * 4, 512, 1024, 304,
             COMMON_OPS | frozenset({"mfma"}))

ALL_ARCHS = (SM80, SM90, SM100, CDNA3)


NV_THREADS_PER_SM = 2048          # resident threads an SM of every NVIDIA arch here holds
NV_RESERVED_SHARED = 1024         # shared memory the toolchain reserves per CTA (sm80 on)


def resident_ctas(arch: Arch, threads: int, registers: int, shared: int) -> int:
    """CTAs of a kernel one SM of `arch` (NVIDIA) holds at once, by its registers a thread (allocated in 8s), its
    dynamic `shared` bytes (plus the reserved KiB each; an SM has the block maximum plus one reserved KiB) and
    its threads."""
    by_regs = arch.regs_per_block // (-(-registers // 8) * 8 * threads)
    by_shared = (arch.smem_per_block_max + NV_RESERVED_SHARED) // (shared + NV_RESERVED_SHARED)
    return min(by_regs, by_shared, NV_THREADS_PER_SM // threads)


# the names people use for an arch besides sm90 / cuda:90 / 90 / gfx942
_FAMILIES = {"ampere": "sm80", "a100": "sm80", "hopper": "sm90", "h100": "sm90", "h200": "sm90",
             "blackwell": "sm100", "b200": "sm100", "mi300": "cdna3", "mi300x": "cdna3"}


def arch_by_name(name: str) -> Arch:
    """'sm90', 'SM90', 'sm_90', 'sm90a', 'cuda:90', '90', 'compute_90', 'hopper', 'gfx942', 'cdna3' -> the Arch."""
    key = str(name).strip().lower().replace("cuda:", "sm").replace("hip:", "").replace("compute_", "sm")
    key = _FAMILIES.get(key, key).replace("_", "").replace("-", "")
    if key.isdigit():
        key = "sm" + key
    if key.startswith("sm") and key.endswith("a") and key[2:-1].isdigit():    # sm90a: the arch-specific target
        key = key[:-1]
    for a in ALL_ARCHS:
        if key in (a.name, str(a.version)):
            return a
    raise ValueError(f"unknown arch {name!r}; known: {', '.join(a.name for a in ALL_ARCHS)} (also sm_90, 90, "
                     "hopper, ...)")


def current_arch() -> Arch | None:
    """The arch of the GPU present (device 0 or torch's current device), or None without one."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    if getattr(torch.version, "hip", None):
        name = torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName.split(":")[0]
        return arch_by_name(name)
    major, minor = torch.cuda.get_device_capability()
    cap = major * 10 + minor
    best = None
    for a in (SM80, SM90, SM100):
        if cap >= a.version and (best is None or a.version > best.version):
            best = a
    if best is None:
        raise RuntimeError(f"GPU compute capability {major}.{minor} is older than sm_80, which gluon needs")
    return best


# ------------------------------------------------------------------------------ TMA (SM90+)
# The one statement of the TMA box rules: the layout pass checks a kernel's declared boxes with them, the
# lowering records each descriptor's box in the kernel ABI with them, and the runtime builds descriptors
# with them.

TMA_MAX_BOX = 256       # elements per box dimension (cuTensorMapEncodeTiled)
# swizzle width in bytes -> its CUtensorMapSwizzle value (what Triton's descriptor metadata records)
TMA_SWIZZLE_MODE = {0: 0, 32: 1, 64: 2, 128: 3}


def tma_box_shape(block_shape, elem_bytes: int, swizzle_bytes: int) -> tuple[int, ...]:
    """The TMA box a kernel moves a `block_shape` tile with, as Triton 3.6 computes it (`getTMABlockShape`,
    TMAUtilities.cpp): every dimension clamped to 256, and with a swizzle the contiguous (last) dimension
    exactly the swizzle width in elements (a 64x128 fp16 tile with 128-byte swizzle moves as 64x64
    boxes). Raises ValueError when the tile is narrower than its swizzle, or (no swizzle) its inner
    bytes are not a multiple of 16."""
    box = [min(int(b), TMA_MAX_BOX) for b in block_shape]
    if swizzle_bytes:
        contig = swizzle_bytes // elem_bytes
        if box[-1] < contig:
            raise ValueError(f"block {tuple(block_shape)} is {block_shape[-1] * elem_bytes} bytes wide, "
                             f"narrower than its {swizzle_bytes}-byte swizzle")
        box[-1] = contig
    elif (box[-1] * elem_bytes) % 16:
        raise ValueError(f"block {tuple(block_shape)}: the inner box dimension is "
                         f"{box[-1] * elem_bytes} bytes; TMA needs a multiple of 16 bytes")
    return tuple(box)


def tma_box_problem(box, elem_bytes: int, swizzle_bytes: int) -> str | None:
    """Why a TMA box is illegal (cuTensorMapEncodeTiled's rules), or None."""
    box = tuple(box)
    if any(not 1 <= b <= TMA_MAX_BOX for b in box):
        return f"box dimensions must be in 1..{TMA_MAX_BOX}, got box {box}"
    inner = box[-1] * elem_bytes
    if swizzle_bytes and inner > swizzle_bytes:
        return (f"the inner box dimension is {inner} bytes, wider than the {swizzle_bytes}-byte swizzle "
                f"(box {box})")
    if inner % 16:
        return f"the inner box dimension is {inner} bytes; TMA needs a multiple of 16 (box {box})"
    return None
