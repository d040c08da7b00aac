"""Python mlx's side of bench/suite.exs's "under load" rows: the same small
eager calls and a compiled call, each timed in phases of back-to-back
iterations on the CPU device. Prints one JSON line: for each case, the median
over phases of the mean microseconds an iteration took.

    python3 bench/load_reference.py [--quick]
"""

import json
import sys
import time

import mlx.core as mx


def phases(step, iterations, count):
    for i in range(iterations):  # warm-up
        step(i)
    means = []
    for _ in range(count):
        started = time.perf_counter()
        for i in range(iterations):
            step(i)
        means.append((time.perf_counter() - started) / iterations * 1e6)
    means.sort()
    return means[len(means) // 2]


def main():
    quick = "--quick" in sys.argv
    iterations, count = (50, 3) if quick else (300, 5)
    mx.set_default_device(mx.cpu)

    one = mx.array(1.0, dtype=mx.float32)
    base = mx.arange(16, dtype=mx.int32)
    a = mx.arange(16, dtype=mx.float32)
    b = mx.arange(16, dtype=mx.float32)
    mx.eval(one, base, a, b)
    uncompiled = lambda x: (mx.exp(x) * 2).sum()  # noqa: E731
    compiled = mx.compile(uncompiled)

    cases = {
        "add_item": lambda i: (one + one).item(),
        "loop": lambda i: mx.eval(base + mx.full((), i + 1, dtype=mx.int32)),
        "add_sum_item": lambda i: (a + b).sum().item(),
        "compiled_call": lambda i: compiled(a).item(),
        # the same function without mx.compile: MLX's three kernels, as an
        # unfused ExMLX.Compiler program runs them
        "compiled_call_uncompiled": lambda i: uncompiled(a).item(),
    }
    result = {name: phases(step, iterations, count) for name, step in cases.items()}
    result["mlx_version"] = mx.__version__
    print(json.dumps(result))


if __name__ == "__main__":
    main()
