"""Which of MLX's CUDA quantized_matmul products are right: each against the
product of the dequantized matrix computed on the CPU, for both layouts,
several row counts, contracted lengths, group sizes, bits and types.

    PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda python3 bench/gpu/qmm_probe.py

Prints one line per case: `ok` or `WRONG`, the largest difference over the
largest value of the CPU's product, the shapes.
"""

import itertools

import mlx.core as mx


def case(transpose, m, k, n, group_size, bits, dtype):
    key = mx.random.key(m * 1_000_003 + k * 1009 + n * 31 + group_size + bits)
    k1, k2 = mx.random.split(key)
    x = mx.random.normal((m, k), key=k1).astype(dtype)
    # stored {n, k} (transpose: x · wᵀ) or {k, n}, grouped along the last axis
    shape = (n, k) if transpose else (k, n)
    w = (mx.random.normal(shape, key=k2) * 0.5).astype(dtype)
    with mx.stream(mx.cpu):
        packed, scales, biases = mx.quantize(w, group_size=group_size, bits=bits)
        dense = mx.dequantize(packed, scales, biases, group_size=group_size, bits=bits)
        expected = mx.matmul(x.astype(mx.float32), (dense.T if transpose else dense).astype(mx.float32))
        mx.eval(expected)
    got = mx.quantized_matmul(
        x, packed, scales, biases, transpose=transpose, group_size=group_size, bits=bits,
        stream=mx.gpu,
    ).astype(mx.float32)
    mx.eval(got)
    with mx.stream(mx.cpu):
        gap = (mx.max(mx.abs(got - expected)) / mx.maximum(mx.max(mx.abs(expected)), 1.0)).item()
    tolerance = 1e-5 if dtype == mx.float32 else 2e-2
    status = "ok" if gap <= tolerance else "WRONG"
    print(f"{status:5} {gap:.2e} transpose={transpose} m={m} k={k} n={n} "
          f"group_size={group_size} bits={bits} {dtype}", flush=True)
    return status == "ok"


def main():
    results = []
    for transpose, m, k, group_size, bits in itertools.product(
        [True, False], [1, 3, 32], [64, 128, 1024], [32, 64, 128], [4, 8]
    ):
        if k % group_size and transpose:
            continue
        results.append(case(transpose, m, k, 128, group_size, bits, mx.float32))
    for transpose, m in itertools.product([True, False], [1, 3, 32]):
        results.append(case(transpose, m, 2048, 256, 64, 4, mx.bfloat16))
    print(f"{sum(results)} of {len(results)} right")


if __name__ == "__main__":
    main()
