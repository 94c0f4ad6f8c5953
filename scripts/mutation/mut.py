#!/usr/bin/env python3
# mut.py pkgdir file old new [occurrence]: literal replacement via go test -overlay
import sys, subprocess, json, os
pkg, f, old, new = sys.argv[1:5]
occ = int(sys.argv[5]) if len(sys.argv) > 5 else None
root = os.environ.get("ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
src = os.path.join(root, pkg, f)
text = open(src).read()
n = text.count(old)
label = f"{f}: {old!r} -> {new!r}" + (f" #{occ}" if occ is not None else "")
if n == 0 or (n > 1 and occ is None):
    print(f"BAD({n} matches) {label}"); sys.exit()
idx = -1
for _ in range((occ or 0) + 1):
    idx = text.index(old, idx + 1)
mut = text[:idx] + new + text[idx + len(old):]
m = "/tmp/h5/mut/mutant.go"
open(m, "w").write(mut)
json.dump({"Replace": {src: m}}, open("/tmp/h5/mut/ov.json", "w"))
def run(*a):
    return subprocess.run(["nice", "-n", "15", "go", "test", "-count=1", "-overlay", "/tmp/h5/mut/ov.json", *a, "./" + pkg], cwd=root, capture_output=True, text=True)
r = run("-run", "^$")
if r.returncode: print("NOTVIABLE", label, r.stdout[-300:]); sys.exit()
r = run("-short")
open("/tmp/h5/mut/last.txt", "w").write(r.stdout + r.stderr)
print("KILLED" if r.returncode else "LIVED ", label)
