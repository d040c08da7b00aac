"""Whether MLX's CUDA quantized ops read a quantized matrix right when it is a
view: rows sliced out of a larger quantized matrix (packed values, scales and
biases sliced alike, as ExMLX splits a checkpoint's fused query/key/value or
gate/up layer: ExMLX.Backend.slice/5) or regrouped by a reshape. Each GPU
result against the CPU's dequantized product of the same rows, computed from
copies of the stored rows.

    PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda python3 bench/gpu/quantized_views_probe.py
    python3 bench/gpu/quantized_views_probe.py --cpu   # MLX's CPU, the script's own check

Prints one line per case: `ok` or `WRONG`, the largest difference over the
largest value of the CPU's result, the case.
"""

import itertools
import sys

import mlx.core as mx

DEVICE = mx.cpu if "--cpu" in sys.argv else mx.gpu


def report(name, got, expected):
    with mx.stream(mx.cpu):
        got = got.astype(mx.float32)
        gap = (mx.max(mx.abs(got - expected)) / mx.maximum(mx.max(mx.abs(expected)), 1.0)).item()
    status = "ok" if gap <= 1e-5 else "WRONG"
    print(f"{status:5} {gap:.2e} {name}", flush=True)
    return status == "ok"


def case(op, rows, start, m, k, group_size, bits):
    key = mx.random.key(rows * 7919 + start * 104729 + m * 31 + k + group_size + bits)
    k1, k2 = mx.random.split(key)
    # the fused layer, stored {rows, k} as a checkpoint's linear weight
    fused = mx.random.normal((rows, k), key=k1) * 0.5
    x = mx.random.normal((m, k), key=k2)
    n = rows // 4
    with mx.stream(mx.cpu):
        triple = mx.quantize(fused, group_size=group_size, bits=bits)
        mx.eval(triple)
        # the view's rows as copies of their own: the reference's input
        copies = [mx.array(t[start:start + n]) for t in triple]
        dense = mx.dequantize(*copies, group_size=group_size, bits=bits)
        expected = dense if op == "dequantize" else mx.matmul(x, dense.T)
        mx.eval(expected)
    views = [t[start:start + n] for t in triple]
    if op == "dequantize":
        got = mx.dequantize(*views, group_size=group_size, bits=bits, stream=DEVICE)
    elif op == "quantized_matmul":
        got = mx.quantized_matmul(
            x, *views, transpose=True, group_size=group_size, bits=bits, stream=DEVICE
        )
    else:  # dequantized on the GPU, then multiplied there
        w = mx.dequantize(*views, group_size=group_size, bits=bits, stream=DEVICE)
        got = mx.matmul(x, w.T, stream=DEVICE)
    mx.eval(got)
    return report(
        f"{op} rows {start}..{start + n} of {rows}, m={m} k={k} "
        f"group_size={group_size} bits={bits}",
        got,
        expected,
    )


def main():
    results = []
    for op, start, m, k, group_size in itertools.product(
        ["dequantize", "quantized_matmul", "dequantize then matmul"],
        [0, 16, 48],
        [1, 8],
        [32, 64, 256],
        [32, 64],
    ):
        if k % group_size:
            continue
        results.append(case(op, 64, start, m, k, group_size, 4))
    print(f"{sum(results)} of {len(results)} right")


if __name__ == "__main__":
    main()
