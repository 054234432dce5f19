#!/usr/bin/env python3
"""Why journal segments are zero-filled ahead of use: appends of 30 KB (about one commit group at
128 connections), each followed by fdatasync, to a file that grows with each append against one
zero-filled and synced beforehand. Prints wall time and CPU time per append + sync. Writes under
target/bench-tmp (the project's disk, not a tmpfs). Usage: scripts/experiments/fdatasync_prealloc.py [n=3000]"""
import os
import resource
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
BLOCK = b"x" * 30000
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "bench-tmp")
os.makedirs(here, exist_ok=True)
path = os.path.join(here, "fdatasync_prealloc.wal")


def run(zero_filled):
    if os.path.exists(path):
        os.remove(path)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        if zero_filled:
            z = b"\0" * (1 << 20)
            for _ in range(N * len(BLOCK) // len(z) + 2):
                os.write(fd, z)
            os.fsync(fd)
            os.lseek(fd, 0, 0)
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.time()
        for _ in range(N):
            os.write(fd, BLOCK)
            os.fdatasync(fd)
        t, r1 = time.time() - t0, resource.getrusage(resource.RUSAGE_SELF)
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        kind = "zero-filled" if zero_filled else "growing"
        print(f"{kind:<12} {t / N * 1e6:6.0f} us per append + fdatasync, {cpu / N * 1e6:5.0f} us of CPU")
    finally:
        os.close(fd)
        os.remove(path)


for zf in (False, True, False, True):
    run(zf)
