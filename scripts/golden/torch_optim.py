#!/usr/bin/python3
"""Writes internal/optim/testdata/torch_golden.json: what torch.optim and
torch.optim.lr_scheduler give on the inputs internal/optim's tests feed the
ps's rules and schedules. Run from the repository root with torch installed:

    /usr/bin/python3 scripts/golden/torch_optim.py

The Go tests read the file (they need no torch). Inputs come from splitmix64
(the same generator the tests use), so only the outputs are stored.

Dense: a parameter of ROWS*DIM values, STEPS updates with random gradients.
Sparse: ROWS parameters of DIM values, each with its own optimizer (a row's
state lives with the row), each stepped only on the steps its coin comes up.

torch computes in float64, and the parameters and every state tensor are
rounded to float32 after each step: the ps's contract (float64 arithmetic,
float32 stores). So the values compare torch's formulas with the ps's, not
float32 kernels' roundings (torch's float32 AdamW, say, rounds its decay
factor 1 - lr*weight_decay to float32 once, which alone moves the result by
about 1e-5 over 1000 steps).
"""
import json
import math
import os
import sys

import torch

STEPS, ROWS, DIM = 1000, 4, 4
MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self):
        """A float32-exact value in [-1, 1)."""
        return (self.next() >> 40) / float(1 << 23) - 1.0


def inputs():
    """Initial values, then per step the gradients and which rows are pushed."""
    r = SplitMix64(27)
    init = [r.uniform() for _ in range(ROWS * DIM)]
    steps = []
    for _ in range(STEPS):
        g = [r.uniform() for _ in range(ROWS * DIM)]
        pushed = [r.next() >> 63 == 1 for _ in range(ROWS)]
        steps.append((g, pushed))
    return init, steps


# name -> (Go optim.Config as JSON, torch constructor, torch state to preset)
def rms_state(momentum, centered):
    def preset(p):
        st = {"step": 0, "square_avg": torch.ones_like(p)}
        if momentum > 0:
            st["momentum_buffer"] = torch.zeros_like(p)
        if centered:
            st["grad_avg"] = torch.zeros_like(p)
        return st
    return preset


CASES = {
    "sgd": ({"name": "sgd", "learning_rate": 0.01}, lambda p: torch.optim.SGD(p, lr=0.01), None),
    "momentum": ({"name": "momentum", "learning_rate": 0.01, "momentum": 0.9},
                 lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), None),
    "nesterov": ({"name": "momentum", "learning_rate": 0.01, "momentum": 0.9, "nesterov": True},
                 lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True), None),
    "adagrad": ({"name": "adagrad", "learning_rate": 0.05, "initial_accumulator": 0.1, "epsilon": 1e-10},
                lambda p: torch.optim.Adagrad(p, lr=0.05, initial_accumulator_value=0.1, eps=1e-10), None),
    "adadelta": ({"name": "adadelta", "learning_rate": 1.0, "rho": 0.9, "epsilon": 1e-6},
                 lambda p: torch.optim.Adadelta(p, lr=1.0, rho=0.9, eps=1e-6), None),
    "adam": ({"name": "adam", "learning_rate": 0.01},
             lambda p: torch.optim.Adam(p, lr=0.01), None),
    "adamw": ({"name": "adamw", "learning_rate": 0.01, "weight_decay": 0.05},
              lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.05), None),
    "rmsprop": ({"name": "rmsprop", "learning_rate": 0.01, "epsilon": 1e-10},
                lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-10), rms_state(0, False)),
    "rmsprop_momentum": ({"name": "rmsprop", "learning_rate": 0.01, "momentum": 0.5, "epsilon": 1e-10},
                         lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-10, momentum=0.5),
                         rms_state(0.5, False)),
    "rmsprop_centered": ({"name": "rmsprop", "learning_rate": 0.01, "momentum": 0.5, "centered": True, "epsilon": 1e-10},
                         lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-10, momentum=0.5, centered=True),
                         rms_state(0.5, True)),
}


def run(make, preset, params, grads_of_step):
    """Steps one optimizer over params; grads_of_step(t) gives each param's
    gradient at step t or None to skip it."""
    opt = make(params)
    if preset:
        for p in params:
            opt.state[p] = preset(p)
    for t in range(STEPS):
        gs = grads_of_step(t)
        for p, g in zip(params, gs):
            p.grad = None if g is None else torch.tensor(g, dtype=torch.float64)
        opt.step()
        with torch.no_grad():
            for p in params:
                p.copy_(p.float().double())
                for v in opt.state[p].values():
                    if torch.is_tensor(v) and v.shape == p.shape:
                        v.copy_(v.float().double())
    return [float(x) for p in params for x in p.detach().reshape(-1).tolist()]


def rules(init, steps):
    out = {}
    for name, (cfg, make, preset) in CASES.items():
        dense = run(make, preset, [torch.tensor(init, dtype=torch.float64, requires_grad=True)],
                    lambda t: [steps[t][0]])
        rows = []
        for r in range(ROWS):
            p = torch.tensor(init[r * DIM:(r + 1) * DIM], dtype=torch.float64, requires_grad=True)
            rows += run(make, preset, [p],
                        lambda t, r=r: [steps[t][0][r * DIM:(r + 1) * DIM] if steps[t][1][r] else None])
        out[name] = {"config": cfg, "dense": dense, "rows": rows}
    return out


SCHEDULES = {
    "step(step_size=30,gamma=0.7)": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=30, gamma=0.7),
    "multistep(milestones=50:120:300,gamma=0.5)":
        lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[50, 120, 300], gamma=0.5),
    "exponential_lr(gamma=0.99)": lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.99),
    "cosine_annealing(t_max=200,eta_min=0.001)":
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=200, eta_min=0.001),
}


def schedules():
    out = {}
    for text, make in SCHEDULES.items():
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.1)
        s = make(opt)
        rates = []
        for _ in range(400):
            rates.append(opt.param_groups[0]["lr"])
            opt.step()
            s.step()
        out[text] = {"base": 0.1, "rates": rates}
    return out


def main():
    torch.manual_seed(0)
    init, steps = inputs()
    doc = {"torch": torch.__version__, "steps": STEPS, "rows": ROWS, "dim": DIM,
           "rules": rules(init, steps), "schedules": schedules()}
    path = os.path.join("internal", "optim", "testdata", "torch_golden.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
