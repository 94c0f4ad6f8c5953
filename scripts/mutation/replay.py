#!/usr/bin/env python3
# replay.py pkgdir gremlins.json STATUS...: re-run the mutants of the given
# statuses (e.g. "NOT COVERED") by hand, applying the same token change at
# line:col through go test -overlay, and print KILLED/LIVED for each.
import sys, json, subprocess, os
pkg, js, *statuses = sys.argv[1:]
root = os.environ.get("ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MUT = {
 "ARITHMETIC_BASE": {"+": "-", "-": "+", "*": "/", "/": "*", "%": "*"},
 "CONDITIONALS_BOUNDARY": {"<=": "<", ">=": ">", "<": "<=", ">": ">="},
 "CONDITIONALS_NEGATION": {"==": "!=", "!=": "==", "<=": ">", ">=": "<", "<": ">=", ">": "<="},
 "INCREMENT_DECREMENT": {"++": "--", "--": "++"},
 "INVERT_NEGATIVES": {"-": "+"},
 "INVERT_LOGICAL": {"&&": "||", "||": "&&"},
 "INVERT_LOOPCTRL": {"break": "continue", "continue": "break"},
 "INVERT_BITWISE": {"&^": "&", "<<": ">>", ">>": "<<", "&": "|", "|": "&", "^": "&"},
 "INVERT_BWASSIGN": {"&^=": "&=", "<<=": ">>=", ">>=": "<<=", "&=": "|=", "|=": "&=", "^=": "&="},
 "INVERT_ASSIGNMENTS": {"+=": "-=", "-=": "+=", "*=": "/=", "/=": "*=", "%=": "*="},
 "REMOVE_SELF_ASSIGNMENTS": {"+=": "=", "-=": "=", "*=": "=", "/=": "=", "%=": "=", "&=": "=", "|=": "=", "^=": "=", "<<=": "=", ">>=": "=", "&^=": "="},
}
d = json.load(open(js))
def run(ov, *a):
    return subprocess.run(["nice", "-n", "15", "go", "test", "-count=1", "-overlay", ov, *a, "./" + pkg], cwd=root, capture_output=True, text=True)
res = {}
for f in d["files"]:
    src = os.path.join(root, pkg, f["file_name"])
    lines = open(src).read().split("\n")
    for m in f["mutations"]:
        if m["status"] not in statuses:
            continue
        ln, col, typ = m["line"], m["column"], m["type"]
        line = lines[ln - 1].encode()
        i = col - 1
        tok = next((k for k in sorted(MUT[typ], key=len, reverse=True) if line[i:i+len(k)] == k.encode()), None)
        label = f"{typ} at {f['file_name']}:{ln}:{col}"
        if tok is None:
            print("NOTOKEN", label, line[i:i+5]); continue
        nl = line[:i] + MUT[typ][tok].encode() + line[i+len(tok):]
        mut = lines[:]; mut[ln - 1] = nl.decode()
        mf = "/tmp/h5/mut/replay_mutant.go"
        open(mf, "w").write("\n".join(mut))
        ov = "/tmp/h5/mut/replay_ov.json"
        json.dump({"Replace": {src: mf}}, open(ov, "w"))
        if run(ov, "-run", "^$").returncode:
            st = "NOTVIABLE"
        else:
            r = run(ov, "-short", "-timeout", "90s")
            st = "LIVED" if r.returncode == 0 else ("TIMEDOUT" if "test timed out" in r.stdout + r.stderr else "KILLED")
        res[st] = res.get(st, 0) + 1
        print(f"{st:9} {label}  [{tok} -> {MUT[typ][tok]}]  {nl.decode().strip()}", flush=True)
print(res)
