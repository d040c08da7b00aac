"""Reference measurements for bench/suite.exs: Python mlx (the same libmlx
0.32.2 build, relinked to the same OpenBLAS) and numpy (OpenBLAS).

Prints one JSON object. `--quick` shrinks sizes and repetitions;
`--dispatch-only` times only the op-dispatch cases, `--matmul-only` only
the matmuls.
"""
import json
import sys

import numpy as np

from timing import timed

QUICK = "--quick" in sys.argv
# Only the op-dispatch cases (bench/suite.exs alternates them with its own).
DISPATCH_ONLY = "--dispatch-only" in sys.argv
# Only the matmul cases (mlx and numpy), likewise alternated.
MATMUL_ONLY = "--matmul-only" in sys.argv

try:
    import mlx.core as mx
except Exception as error:  # reported, not fatal: numpy figures still come
    mx = None
    MLX_ERROR = str(error)


out = {"numpy": np.__version__}
reps = 5 if QUICK else 15
graph = 200 if QUICK else 1000
sizes = [256, 512] if QUICK else [512, 1024, 2048]

if mx is not None:
    mx.set_default_device(mx.cpu)
    out["mlx"] = mx.__version__
    one = mx.array(1.0)
    mx.eval(one)

    def lazy_graph():
        acc = one
        for _ in range(graph):
            acc = mx.add(acc, one)
        mx.eval(acc)

    def lazy_build_only():
        acc = one
        for _ in range(graph):
            acc = mx.add(acc, one)
        return acc

    def eager():
        for _ in range(graph // 10):
            mx.add(one, one).item()

    if not MATMUL_ONLY:
        out["lazy_graph_s_per_op"] = {k: v / graph for k, v in timed(lazy_graph, reps).items()}
        out["lazy_build_s_per_op"] = {
            k: v / graph for k, v in timed(lazy_build_only, reps).items()
        }
        out["eager_s_per_op"] = {k: v / (graph // 10) for k, v in timed(eager, reps).items()}
    out["mlx_matmul_gflops"] = {}
    for n in [] if DISPATCH_ONLY else sizes:
        a = mx.random.normal((n, n))
        b = mx.random.normal((n, n))
        mx.eval(a, b)
        t = timed(lambda: mx.eval(mx.matmul(a, b)), reps)
        out["mlx_matmul_gflops"][str(n)] = 2 * n**3 / t["median"] / 1e9
else:
    out["mlx_error"] = MLX_ERROR

out["numpy_matmul_gflops"] = {}
for n in [] if DISPATCH_ONLY else sizes:
    a = np.random.standard_normal((n, n)).astype(np.float32)
    b = np.random.standard_normal((n, n)).astype(np.float32)
    t = timed(lambda: a @ b, reps)
    out["numpy_matmul_gflops"][str(n)] = 2 * n**3 / t["median"] / 1e9

print(json.dumps(out))
