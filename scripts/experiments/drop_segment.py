#!/usr/bin/env python3
"""Why covered journal segments are cut down before they are deleted (src/store/journal.rs,
drop_segments): an append + fdatasync loop on a zero-filled file, as the journal does, while four
64 MB files are deleted, either unlinked at once or cut down 8 MiB at a time first. Prints the
slowest fdatasync before and after the deletion began. On ext4 mounted with `discard` (this
project's machines) unlinking stalled it 12-18 ms, cutting down first 2-3 ms.
Usage: scripts/experiments/drop_segment.py [unlink|cut] [dir=target/bench-tmp]"""
import os
import sys
import tempfile
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "cut"
BASE = sys.argv[2] if len(sys.argv) > 2 else "target/bench-tmp"
os.makedirs(BASE, exist_ok=True)
d = tempfile.mkdtemp(dir=BASE)
j = os.open(os.path.join(d, "journal"), os.O_RDWR | os.O_CREAT)
os.write(j, b"\0" * (64 << 20))
os.fsync(j)
for i in range(4):
    g = os.open(os.path.join(d, f"seg{i}"), os.O_RDWR | os.O_CREAT)
    for _ in range(64):
        os.write(g, b"x" * (1 << 20))
    os.fsync(g)
    os.close(g)
lat = []
stop = False


def appender():
    off = 0
    while not stop:
        t = time.perf_counter()
        os.pwrite(j, b"y" * 4096, off)
        os.fdatasync(j)
        lat.append((t, time.perf_counter() - t))
        off = (off + 4096) % (60 << 20)


th = threading.Thread(target=appender)
th.start()
time.sleep(1)
t0 = time.perf_counter()
for i in range(4):
    p = os.path.join(d, f"seg{i}")
    if MODE == "cut":
        g = os.open(p, os.O_RDWR)
        size = 64 << 20
        while size > 0:
            size -= 8 << 20
            os.ftruncate(g, size)
        os.close(g)
    os.unlink(p)
took = time.perf_counter() - t0
time.sleep(2)
stop = True
th.join()
before = max(x for t, x in lat if t < t0)
after = max(x for t, x in lat if t >= t0)
print(f"{MODE}: deleting took {took * 1000:.0f} ms; slowest fdatasync before {before * 1000:.1f} ms, "
      f"after {after * 1000:.1f} ms ({len(lat)} appends)")
os.close(j)
os.unlink(os.path.join(d, "journal"))
os.rmdir(d)
