"""Expected learning rates for tests/optim/test_lr_scheduler.cpp, from PyTorch 1.13.

Regenerate (needs torch 1.13; on the dev box /usr/bin/python3 has it):
    /usr/bin/python3 tests/optim/lr_scheduler_reference.py > /tmp/ref.txt
and paste each block over the matching kRef.../kMom... array of the test (then
clang-format it as the rest of the tree). Each row is
scheduler.get_last_lr() after construction (row 0) and after each step(),
one value per param group (lrs 0.1, 0.05 and 0.003: three groups).
"""
import warnings

import torch
from torch.optim import SGD, Adam
from torch.optim import lr_scheduler as S

warnings.filterwarnings("ignore")  # "lr_scheduler.step() before optimizer.step()"
STEPS = 30
LRS = [0.1, 0.05, 0.003]


def optimizer(cls=SGD, **kw):
    groups = [{"params": [torch.zeros(1, requires_grad=True)], "lr": lr} for lr in LRS]
    return cls(groups, lr=LRS[0], **kw)


def run(name, make, steps=STEPS, cls=SGD, **kw):
    opt = optimizer(cls, **kw)
    sched = make(opt)
    rows = [sched.get_last_lr()]
    moms = []
    for _ in range(steps):
        opt.step()
        sched.step()
        rows.append(sched.get_last_lr())
        g = opt.param_groups[1]
        moms.append(g["betas"][0] if "betas" in g else g["momentum"])
    print(f"// {name}")
    print(f"const std::vector<std::vector<double>> kRef{name} = {{")
    for r in rows:
        print("    {" + ", ".join(repr(float(x)) for x in r) + "},")
    print("};")
    if kw.get("momentum") is not None or cls is Adam:
        print(f"// group 1's momentum after each step")
        print(f"const std::vector<double> kMom{name} = {{" + ", ".join(repr(float(m)) for m in moms) + "};")


run("StepLR", lambda o: S.StepLR(o, step_size=7, gamma=0.3))
run("MultiStepLR", lambda o: S.MultiStepLR(o, milestones=[3, 10, 11, 25], gamma=0.5))
run("ExponentialLR", lambda o: S.ExponentialLR(o, gamma=0.9))
run("CosineAnnealingLR", lambda o: S.CosineAnnealingLR(o, T_max=12, eta_min=0.001))
run("LinearLR", lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=8))
run("OneCycleLR", lambda o: S.OneCycleLR(o, max_lr=[0.1, 0.05, 0.003], total_steps=30), steps=30, momentum=0.9)
run("OneCycleLRThreePhaseLinear",
    lambda o: S.OneCycleLR(o, max_lr=0.2, epochs=5, steps_per_epoch=5, pct_start=0.25, anneal_strategy="linear",
                           three_phase=True, div_factor=10.0, final_div_factor=100.0), steps=24, cls=Adam)
# (a 25th step is the extra one PyTorch allows at last_epoch == total_steps; linear
# annealing extrapolates it to a negative lr, which halfgrad rejects: see the test)


def sequential(o):
    warm = S.LinearLR(o, start_factor=0.1, total_iters=5)
    cos = S.CosineAnnealingLR(o, T_max=10, eta_min=0.0001)
    step = S.StepLR(o, step_size=3, gamma=0.5)
    return S.SequentialLR(o, [warm, cos, step], milestones=[5, 15])


run("SequentialLR", sequential)
