"""Python mlx's side of test/ex_mlx/quantization_mlx_test.exs: for each case
line of DIR/cases.txt (`type bits group_size rows columns`), reads the
matrix w and the rows x (raw native-order bytes of `type`: f32, f16 or bf16)
and writes what mx.quantize, mx.dequantize and mx.quantized_matmul give
(packed, scales, biases, dequantized, product) as raw bytes.

    python3 mlx_quantization.py DIR
"""

import os
import sys

import mlx.core as mx
import numpy as np

TYPES = {
    "f32": (mx.float32, np.float32),
    "f16": (mx.float16, np.float16),
    "bf16": (mx.bfloat16, np.uint16),
}


def load(folder, name, kind, shape):
    with open(os.path.join(folder, name), "rb") as f:
        raw = f.read()
    mlx_type, numpy_type = TYPES[kind]
    a = mx.array(np.frombuffer(raw, dtype=numpy_type).reshape(shape))
    return a.view(mlx_type) if kind == "bf16" else a


def save(folder, name, a):
    if a.dtype == mx.bfloat16:
        a = a.view(mx.uint16)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(np.array(a).tobytes())


def main():
    folder = sys.argv[1]
    mx.set_default_device(mx.cpu)
    with open(os.path.join(folder, "cases.txt")) as f:
        cases = [line.split() for line in f if line.strip()]
    for kind, bits, group_size, rows, columns in cases:
        bits, group_size, rows, columns = map(int, (bits, group_size, rows, columns))
        tag = f"{kind}_{bits}_{group_size}"
        w = load(folder, f"w_{tag}.bin", kind, (rows, columns))
        x = load(folder, f"x_{tag}.bin", kind, (2, columns))
        packed, scales, biases = mx.quantize(w, group_size=group_size, bits=bits)
        dequantized = mx.dequantize(packed, scales, biases, group_size=group_size, bits=bits)
        product = mx.quantized_matmul(
            x, packed, scales, biases, transpose=True, group_size=group_size, bits=bits
        )
        results = {
            "packed": packed,
            "scales": scales,
            "biases": biases,
            "dequantized": dequantized,
            "product": product,
        }
        mx.eval(*results.values())
        for name, a in results.items():
            save(folder, f"{name}_{tag}.bin", a)
    print("ok", mx.__version__)


if __name__ == "__main__":
    main()
