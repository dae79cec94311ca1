#!/usr/bin/python3
"""safetensors interop between halfgrad and PyTorch, without the `safetensors`
package (the header is parsed with json, the data read with torch.frombuffer).

  /usr/bin/python3 tests/nn/safetensors_interop.py write PATH
      PyTorch writes the fixture: every dtype, values from formula() below,
      laid out as Hugging Face does (larger itemsize first, then by name; the
      header padded with spaces to 8 bytes). tests/nn/data/pytorch_written.safetensors
      is this file; tests/nn/test_safetensors.cpp checks it against the same formula.
  /usr/bin/python3 tests/nn/safetensors_interop.py check PATH
      Reads a file halfgrad wrote (the test "safetensors: PyTorch reads what
      halfgrad writes" runs this) and compares every tensor with formula(),
      exactly. Exit status 0 when all match.
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64, "BOOL": torch.bool}
CODES = {v: k for k, v in DTYPES.items()}
METADATA = {"source": "pytorch", "formula": "v1"}


def formula():
    """The tensors both sides compute: each value is computed in float64 and
    rounded once, or is exact in its dtype."""
    f64 = torch.float64
    return {
        "f32": (torch.arange(6, dtype=f64) * 0.1 - 0.25).to(torch.float32).reshape(2, 3),
        "f64": torch.arange(5, dtype=f64) / 3.0 - 1.0,
        "f16": ((torch.arange(8, dtype=f64) - 3) * 0.375).to(torch.float16).reshape(2, 2, 2),
        "bf16": ((torch.arange(3, dtype=f64) - 1) * 0.5 + 2).to(torch.bfloat16).reshape(3, 1),
        "i64": torch.arange(4, dtype=torch.int64) ** 2 * 1000000007 - 3,
        "bool": torch.arange(7) % 3 == 0,
        "scalar": torch.tensor(2.5, dtype=f64),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }


def write(path, tensors, metadata):
    names = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header, blobs, at = {"__metadata__": metadata}, [], 0
    for n in names:
        t = tensors[n].contiguous()
        data = t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes()
        header[n] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        if begin == end:
            t = torch.empty(info["shape"], dtype=dtype)
        else:
            t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).reshape(info["shape"])
        out[name] = t
    return out, metadata


def check(path):
    tensors, metadata = read(path)
    expected = formula()
    ok = True
    if set(tensors) != set(expected):
        print(f"names differ: {sorted(tensors)} vs {sorted(expected)}")
        ok = False
    for name, want in expected.items():
        got = tensors.get(name)
        if got is None:
            continue
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            print(f"{name}: got {got.dtype} {list(got.shape)} {got.flatten().tolist()}, "
                  f"want {want.dtype} {list(want.shape)} {want.flatten().tolist()}")
            ok = False
    if metadata.get("writer") != "halfgrad":
        print(f"metadata: got {metadata}")
        ok = False
    print("ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    if sys.argv[1] == "write":
        write(sys.argv[2], formula(), METADATA)
        t, m = read(sys.argv[2])
        assert all(torch.equal(t[k], v) for k, v in formula().items()) and m == METADATA
    else:
        sys.exit(check(sys.argv[2]))
