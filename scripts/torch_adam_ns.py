#!/usr/bin/python3
"""Times torch.optim.Adam's step on one tensor of 2^20 float32 parameters,
the size of internal/optim's BenchmarkUpdate, and prints ns per parameter
and CPU ns per parameter (medians of rounds) so the two can be run alternately on the same machine:

    /usr/bin/python3 scripts/torch_adam_ns.py [rounds] [steps]
    go test -run XXX -bench 'BenchmarkUpdate/adam$' ./internal/optim

One thread, as the Go benchmark's one Update call runs on one core.
Adam's step makes new tensors for sqrt(v) and the division each step, and
glibc hands 4 MiB blocks back to the kernel, so each step faults fresh pages
in; with MALLOC_MMAP_THRESHOLD_=268435456 in the environment it reuses them,
which is torch's best figure (on a loaded machine about 15x less CPU).
"""
import statistics
import sys
import time

import torch


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
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
