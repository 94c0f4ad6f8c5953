#!/usr/bin/env python3
# hand.py ROOT: run every hand mutant of HAND against the tree at ROOT.
import sys, subprocess, json, os
root = sys.argv[1]
only = sys.argv[2] if len(sys.argv) > 2 else None
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "hand_list.py")).read())
tally = {}
for pkg, f, old, new, *occ in HAND:
    if only and only not in pkg: continue
    occ = occ[0] if occ else None
    src = os.path.join(root, pkg, f)
    text = open(src).read()
    n = text.count(old)
    label = f"{pkg}/{f}: {old.strip()[:60]!r} -> {new.strip()[:50]!r}"
    if n == 0 or (n > 1 and occ is None):
        print("BAD", n, label); continue
    idx = -1
    for _ in range((occ or 0) + 1):
        idx = text.index(old, idx + 1)
    m = f"/tmp/h5/mut/hand_mutant.go"
    open(m, "w").write(text[:idx] + new + text[idx + len(old):])
    ov = "/tmp/h5/mut/hand_ov.json"
    json.dump({"Replace": {src: m}}, open(ov, "w"))
    run = lambda *a: subprocess.run(["nice", "-n", "15", "go", "test", "-count=1", "-overlay", ov, *a, "./" + pkg], cwd=root, capture_output=True, text=True)
    if run("-run", "^$").returncode:
        st = "NOTVIABLE"
    else:
        st = "LIVED" if run("-short").returncode == 0 else "KILLED"
    tally.setdefault(pkg, {}).setdefault(st, 0); tally[pkg][st] += 1
    print(f"{st:9} {label}", flush=True)
print(json.dumps(tally))
