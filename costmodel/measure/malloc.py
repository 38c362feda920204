"""glibc malloc's parameters: the one place costmodel sets them (``mallopt``), for two uses.

glibc serves a request from the heap's free chunks when one fits, and otherwise grows the heap
or, for a block above its mmap threshold (128 KiB, rising with use to at most 32 MiB), maps one
fresh; it unmaps such a block on ``free`` and hands the heap's free top back to the OS above the
trim threshold. Every block handed back and taken again is faulted in, page by page, and zeroed
by the kernel.

- **Sweeps** (``keep_freed_heap``): the arrays of a 10,000-point sweep are 80 KB, allocated and
  freed hundreds of times a call; keeping up to 64 MiB of freed heap saves a quarter of the time
  (bench/README.md). Process-wide, once, and only where a program asks: ``predict_grid`` does
  not change its host process's allocator behind its back.
- **Timing on a CPU** (``allocator``): how freed memory is treated while ``costmodel calibrate``
  and ``costmodel measure`` run.

  ``cache`` (their default) keeps freed memory in the process, as PyTorch's CUDA caching
  allocator does on a GPU and jemalloc or tcmalloc setups do on a CPU: ``M_MMAP_MAX`` 0 serves
  every block from the heap, ``M_TRIM_THRESHOLD`` at SIZE_MAX keeps its free top. Once the heap
  has grown to a step's high-water mark (a few steps: a block that fits no free chunk grows it,
  as a caching allocator's pool grows), a step allocates nothing new and its time is its
  kernels'. Left to glibc, a training step's gradients and every output past 32 MiB are faulted
  in anew each step: on the KVM guest this project runs on (virtio-balloon free-page
  reporting) a third to two thirds of a step, varying 2-3x run to run
  (bench/results/time-cpu-2026-12-02b.md), which no model of the kernels can predict.

  ``system`` leaves glibc's defaults: what a plain CPU process pays. The profile's first-touch
  table (``costmodel.measure.calibrate.first_touch_table``) then measures what a fresh block
  costs, and the time model charges it. Only a process that has not run under ``cache`` has
  those defaults: the chunks ``cache`` left in the heap stay there (``malloc_trim`` returns their
  pages, not their address space) and serve later requests, so ``system`` after ``cache`` in one
  process is refused.

On a GPU, or with a C library that is not glibc (macOS, musl), nothing is set: the mode in
effect is ``cache`` on CUDA (torch's caching allocator) and ``system`` on such a CPU, and the
caller is told (``allocator`` yields the mode in effect).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import get_args

from costmodel.devices.efficiency import Allocator
from costmodel.measure import MeasureError

ALLOCATORS: tuple[str, ...] = get_args(Allocator)

# mallopt parameters (malloc.h) and glibc's defaults.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
GLIBC_DEFAULTS = {M_TRIM_THRESHOLD: 128 << 10, M_MMAP_MAX: 65536}
#: keep_freed_heap: freed heap kept up to 64 MiB; blocks from 32 MiB mapped (the most glibc's
#: dynamic threshold reaches; setting the trim threshold turns the dynamic one off).
SWEEP = {M_TRIM_THRESHOLD: 64 << 20, M_MMAP_THRESHOLD: 32 << 20}
#: cache: no block mapped, the heap never trimmed (-1: glibc reads the int as SIZE_MAX).
CACHE = {M_MMAP_MAX: 0, M_TRIM_THRESHOLD: -1}

_libc: ctypes.CDLL | None | bool = False  # False: not looked up yet
_base: dict[int, int] = dict(GLIBC_DEFAULTS)  # what leaving ``cache`` restores
_heap_kept: bool | None = None
_cached = False  # this process has run under cache: its heap keeps freed chunks


def glibc() -> ctypes.CDLL | None:
    """The C library, if it is glibc (``gnu_get_libc_version`` and ``mallopt``); else None."""
    global _libc
    if _libc is False:
        try:
            lib = ctypes.CDLL(None)
            lib.gnu_get_libc_version  # noqa: B018 - only glibc has it (AttributeError otherwise)
            lib.mallopt.argtypes, lib.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _libc = lib
        except (OSError, AttributeError):
            _libc = None
    return _libc if isinstance(_libc, ctypes.CDLL) else None


def _set(params: dict[int, int]) -> bool:
    lib = glibc()
    return lib is not None and all(bool(lib.mallopt(p, v)) for p, v in params.items())


def keep_freed_heap() -> bool:
    """Ask glibc to keep freed heap (up to 64 MiB) instead of returning it to the OS: for a
    program that sweeps at scale. Process-wide, once (it answers the same after); False where
    the C library is not glibc."""
    global _heap_kept
    if _heap_kept is None:
        _heap_kept = _set(SWEEP)
        if _heap_kept:
            _base[M_TRIM_THRESHOLD] = SWEEP[M_TRIM_THRESHOLD]
    return _heap_kept


def check(mode: str) -> str:
    """`mode`, or a one-line MeasureError naming the choices."""
    if mode not in ALLOCATORS:
        raise MeasureError(f"allocator: {mode!r} is not one of {', '.join(ALLOCATORS)}")
    return mode


@contextlib.contextmanager
def allocator(mode: str, device_type: str) -> Iterator[Allocator]:
    """Run the block with freed CPU memory kept in the process (``cache``) or as glibc treats
    it by default (``system``); yields the mode in effect. Leaving ``cache`` restores the
    parameters it found and returns the heap's free pages (``malloc_trim``)."""
    global _cached
    check(mode)
    if device_type != "cpu":
        yield "cache"  # the CUDA caching allocator keeps freed blocks; nothing to set
        return
    lib = glibc()
    if mode == "system" or lib is None:
        if _cached:
            raise MeasureError("allocator: system after cache in one process is not glibc's default "
                               "(freed blocks stay in the heap); run it in a new process")
        yield "system"
        return
    _cached = True
    _set(CACHE)
    try:
        yield "cache"
    finally:
        _set(_base)
        lib.malloc_trim(0)
