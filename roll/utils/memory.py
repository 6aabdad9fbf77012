"""Process memory housekeeping."""

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_free_heap() -> bool:
    """Return the C heap's free pages to the system (glibc `malloc_trim(0)`); False where unavailable.
    Large temporary tensors freed by torch stay in glibc's heap otherwise and count in the process's RSS."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
