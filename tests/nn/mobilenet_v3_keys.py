"""Writes tests/nn/data/mobilenet_v3_small_keys.txt: torchvision 0.14's
mobilenet_v3_small state_dict, one `name shape` line per entry, in order, for
num_classes=10 and num_classes=1000 (a `# num_classes=N` line before each).
Also prints the parameter counts tests/nn/pending/test_mobilenet_v3.cpp checks.

    /usr/bin/python3 tests/nn/mobilenet_v3_keys.py tests/nn/data/mobilenet_v3_small_keys.txt
"""
import sys

import torchvision


def main(path):
    with open(path, "w") as f:
        for classes in (10, 1000):
            m = torchvision.models.mobilenet_v3_small(num_classes=classes)
            f.write(f"# num_classes={classes}\n")
            for name, t in m.state_dict().items():
                f.write(f"{name} [{', '.join(str(s) for s in t.shape)}]\n")
    for kw in ({}, {"num_classes": 10}, {"width_mult": 0.5}, {"width_mult": 0.75, "num_classes": 10},
               {"width_mult": 1.25}, {"reduced_tail": True}, {"dilated": True}):
        m = torchvision.models.mobilenet_v3_small(**kw)
        print(kw, sum(p.numel() for p in m.parameters()), len(m.state_dict()))


if __name__ == "__main__":
    main(sys.argv[1])
