#!/usr/bin/env python3
import json, sys
DEF = {"ARITHMETIC_BASE","CONDITIONALS_BOUNDARY","CONDITIONALS_NEGATION","INCREMENT_DECREMENT","INVERT_NEGATIVES"}
for js in sys.argv[1:]:
    d = json.load(open(js))
    for name, sel in (("default", lambda t: t in DEF), ("all", lambda t: True)):
        c = {}
        for f in d["files"]:
            for m in f["mutations"]:
                if sel(m["type"]):
                    c[m["status"]] = c.get(m["status"], 0) + 1
        k, l, nc = c.get("KILLED",0), c.get("LIVED",0), c.get("NOT COVERED",0)
        to, nv = c.get("TIMED OUT",0), c.get("NOT VIABLE",0)
        eff = 100*k/(k+l) if k+l else float('nan')
        cov = 100*(k+l)/(k+l+nc) if k+l+nc else float('nan')
        print(f"{js.split('/')[-1]:22} {name:8} covered={k+l} killed={k} lived={l} notcovered={nc} timedout={to} notviable={nv} eff={eff:.1f}% cov={cov:.1f}%")
