"""release_free_heap gives freed C-heap memory back to the system (glibc), visible in the process's RSS."""

import subprocess
import sys

CHILD = """
import ctypes, torch
from roll.utils.memory import release_free_heap
def rss():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1]) // 1024
ctypes.CDLL('libc.so.6').mallopt(-3, 2**30)  # M_MMAP_THRESHOLD high: small-tensor frees stay on the heap
keep = []
for i in range(4000):  # 4000 x 64 KiB freed, every other one kept: a fragmented heap as after a reload
    t = torch.empty(16384)
    if i % 40 == 0:
        keep.append(t)
    del t
blocks = [torch.ones(16384) for _ in range(4000)]
del blocks
before = rss()
assert release_free_heap()
print(before, rss())
"""


def test_release_free_heap_lowers_rss():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = map(int, out.stdout.split())
    assert after < before - 100, f"RSS {before} MB -> {after} MB after release_free_heap: nothing returned"
