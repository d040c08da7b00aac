"""The memory MLX's own matrix products take above their inputs and output.

MLX's CUDA backend gives a cuBLASLt product the workspace its heuristic asks
for (up to 32 MiB on Hopper), allocated as a temporary array of MLX's
allocator: it counts in MLX's active and peak memory. This prints, for the
two products of a small attention's scores (4 query heads in 2 groups, 8
queries, depth 8, float32) at two key lengths, the product's output size
and the peak above the start, so a peak above the output is that workspace.
Run where Python's mlx has a GPU (on a staged GPU machine:
`PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda python3 bench/gpu/matmul_workspace.py`).
"""

import mlx.core as mx

mx.random.seed(0)
for keys in [508, 2008]:
    for name, a_shape, b_shape in [
        ("scores @ values", (1, 2, 2, 8, keys), (1, 2, 1, keys, 8)),
        ("queries @ keys^T", (1, 2, 2, 8, 8), (1, 2, 1, 8, keys)),
    ]:
        a = mx.random.normal(a_shape)
        b = mx.random.normal(b_shape)
        mx.eval(a, b)
        mx.synchronize()
        mx.clear_cache()
        start = mx.get_active_memory()
        mx.reset_peak_memory()
        c = a @ b
        mx.eval(c)
        mx.synchronize()
        peak = mx.get_peak_memory() - start
        print(f"{keys} keys, {name}: output {c.nbytes} bytes, peak above the start {peak} bytes")
