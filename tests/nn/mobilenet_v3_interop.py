#!/usr/bin/python3
"""torchvision's MobileNetV3-small against halfgrad's, through a safetensors file.

  /usr/bin/python3 tests/nn/mobilenet_v3_interop.py write DIR
      torch.manual_seed(0); torchvision.models.mobilenet_v3_small(num_classes=10),
      its batch-norm statistics and affine parameters set to seeded random values
      (so that eval mode really normalises), then in eval mode, float32, no
      autocast: writes DIR/mobilenet_v3_small.safetensors (model.state_dict(),
      names unchanged, num_batches_tracked as int64) and DIR/io.safetensors
      ("input" [2, 3, 64, 64] and its "logits" [2, 10]).
      tests/nn/pending/test_mobilenet_v3.cpp ("[.interop]") runs this, loads
      the state dict with nn::load and compares the logits (rtol 1e-4).

No `safetensors` package needed: the writer is safetensors_interop.py's.
"""
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_interop import read, write  # noqa: E402


def build():
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(num_classes=10)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(7)
    return model.eval()


def main(out_dir):
    model = build()
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        logits = model(x)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    write(os.path.join(out_dir, "mobilenet_v3_small.safetensors"), state, {"source": "torchvision"})
    write(os.path.join(out_dir, "io.safetensors"), {"input": x, "logits": logits}, {"source": "torchvision"})
    back, _ = read(os.path.join(out_dir, "mobilenet_v3_small.safetensors"))
    assert list(back) != [] and all(torch.equal(back[k], v) for k, v in state.items())
    print(f"wrote {len(state)} tensors; logits {list(logits.shape)}, |logits| max {logits.abs().max().item():.4g}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "write":
        sys.exit(__doc__)
    main(sys.argv[2])
