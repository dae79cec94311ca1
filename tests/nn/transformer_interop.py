#!/usr/bin/python3
"""nn::LayerNorm and nn::MultiheadAttention against PyTorch's, with the same weights.

  /usr/bin/python3 tests/nn/transformer_interop.py check PATH

PATH is a safetensors file halfgrad wrote (the test "LayerNorm and
MultiheadAttention match PyTorch's with the same weights" in
tests/nn/test_transformer_layers.cpp): the modules' state dicts under "ln." and
"mha." (and "mha_bf." for a batch_first one), their inputs and halfgrad's
outputs, all float64. PyTorch loads the state dicts into its own modules
(strict), runs the same inputs and compares. Exit status 0 when all match.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_interop import read  # noqa: E402


def sub(tensors, prefix):
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def close(name, got, want, ok):
    err = ((got - want).norm() / want.norm()).item()
    if got.shape != want.shape or not err < 1e-10:
        print(f"{name}: shape {list(got.shape)} vs {list(want.shape)}, relative error {err}")
        return False
    return ok


def check(path):
    t, _ = read(path)
    ok = True
    E, H = int(t["dims"][0]), int(t["dims"][1])
    with torch.no_grad():
        ln = torch.nn.LayerNorm(E, dtype=torch.float64)
        ln.load_state_dict(sub(t, "ln.state."))
        ok = close("LayerNorm", ln(t["ln.x"]), t["ln.y"], ok)
        for prefix, batch_first in (("mha.", False), ("mha_bf.", True)):
            m = torch.nn.MultiheadAttention(E, H, batch_first=batch_first, dtype=torch.float64)
            m.load_state_dict(sub(t, prefix + "state."))
            m.eval()
            q, k, v = t[prefix + "q"], t[prefix + "k"], t[prefix + "v"]
            out, w = m(q, k, v, key_padding_mask=t[prefix + "kpm"], attn_mask=t[prefix + "am"])
            ok = close(prefix + "output", out, t[prefix + "out"], ok)
            ok = close(prefix + "weights", w, t[prefix + "w"], ok)
            out, w = m(q, q, q, need_weights=True, average_attn_weights=False)
            ok = close(prefix + "self output", out, t[prefix + "self_out"], ok)
            ok = close(prefix + "self weights", w, t[prefix + "self_w"], ok)
    print("ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "check":
        sys.exit(__doc__)
    sys.exit(check(sys.argv[2]))
