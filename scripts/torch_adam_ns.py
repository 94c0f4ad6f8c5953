#!/usr/bin/python3
"""Times torch.optim.Adam's step on one tensor of 2^20 float32 parameters,
the size of internal/optim's BenchmarkUpdate, and prints ns per parameter
and CPU ns per parameter (medians of rounds) so the two can be run alternately on the same machine:

    /usr/bin/python3 scripts/torch_adam_ns.py [--malloc-defaults] [rounds] [steps]
    go test -run XXX -bench 'BenchmarkUpdate/adam$' ./internal/optim

One thread, as the Go benchmark's one Update call runs on one core.
Adam's step makes new tensors for sqrt(v) and the division each step, and
glibc hands 4 MiB blocks back to the kernel (mmap'd blocks, and the heap's
top past the trim threshold), so each step faults fresh pages in. The script
runs itself again with MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ at
256 MiB so that glibc keeps and reuses them: torch's best figure (on a loaded
machine about 20x less CPU than with glibc's defaults). Pass --malloc-defaults
to time it without.
"""
import os
import statistics
import sys
import time

import torch


KEEP = {"MALLOC_MMAP_THRESHOLD_": "268435456", "MALLOC_TRIM_THRESHOLD_": "268435456"}


def main():
    args = sys.argv[1:]
    if "--malloc-defaults" in args:
        args.remove("--malloc-defaults")
    elif any(os.environ.get(k) != v for k, v in KEEP.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **KEEP})
    rounds = int(args[0]) if len(args) > 0 else 5
    steps = int(args[1]) if len(args) > 1 else 50
    torch.set_num_threads(1)
    n = 1 << 20
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.rand(n, generator=g) * 2 - 1)
    p.grad = (torch.rand(n, generator=g) * 2 - 1) * 1e-2
    opt = torch.optim.Adam([p], lr=1e-3)
    with torch.no_grad():
        for _ in range(5):
            opt.step()
        wall, cpu = [], []
        for _ in range(rounds):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                opt.step()
            wall.append((time.perf_counter() - t0) / steps / n * 1e9)
            cpu.append((time.process_time() - c0) / steps / n * 1e9)
    for what, per in (("ns/param", wall), ("cpu-ns/param", cpu)):
        print("torch.optim.Adam %s: %.3f %s (median of %d rounds of %d steps; range %.3f-%.3f)"
              % (torch.__version__, statistics.median(per), what, rounds, steps, min(per), max(per)))


if __name__ == "__main__":
    main()
