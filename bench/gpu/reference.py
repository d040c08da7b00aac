"""The GPU rows of bench/gpu/bench.exs, measured the same way in Python mlx
(on the same CUDA libmlx as ExMLX) or PyTorch, on the same GPU.

    python3 bench/gpu/reference.py mlx|torch OUT_FILE [tf32-off]

Each row is one line of OUT_FILE: "mlx|torch<TAB>row<TAB>unit<TAB>value", the
value a median over its repetitions (bench/timing.py). Row names and inputs
(sin of a range, cast) are bench.exs's.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from timing import timed  # noqa: E402

impl, out = sys.argv[1], sys.argv[2]
tf32_off = "tf32-off" in sys.argv[3:]
lines = []


def row(name, unit, value):
    lines.append(f"{impl}\t{name}\t{unit}\t{value}\n")


if impl == "mlx":
    import mlx.core as mx

    mx.set_default_device(mx.gpu)
    types = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}

    def matrix(n, t):
        m = mx.sin(mx.arange(n * n, dtype=mx.float32).reshape(n, n)).astype(t)
        mx.eval(m)
        return m

    def matmul_once(a, b):
        mx.eval(a @ b)

    def matmul_ten(a, b):
        outs = [a @ b for _ in range(10)]
        for o in outs:
            mx.eval(o)

    def lazy_chain(x):
        acc = x
        for _ in range(1000):
            acc = acc + x
        mx.eval(acc)

    def chain_big(x, one):
        acc = x
        for _ in range(100):
            acc = acc + one
        mx.eval(acc)

    def scalar():
        one = mx.array(1.0, dtype=mx.float32)
        mx.eval(one)
        return one

    def eager(one):
        (one + one).item()

    def to_gpu(host, n):
        mx.eval(mx.array(host).sum())

    def resident(host, n):
        x = mx.array(host)
        mx.eval(x)
        return x

    def to_host(x, one):
        y = x + one
        mx.eval(y)
        bytes(memoryview(y))

else:
    import numpy as np
    import torch

    torch.backends.cuda.matmul.allow_tf32 = not tf32_off
    torch.backends.cudnn.allow_tf32 = not tf32_off
    types = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    sync = torch.cuda.synchronize

    def matrix(n, t):
        m = torch.sin(torch.arange(n * n, dtype=torch.float32, device="cuda").reshape(n, n)).to(t)
        sync()
        return m

    def matmul_once(a, b):
        a @ b
        sync()

    def matmul_ten(a, b):
        for _ in range(10):
            a @ b
        sync()

    def lazy_chain(x):
        acc = x
        for _ in range(1000):
            acc = acc + x
        sync()

    def chain_big(x, one):
        acc = x
        for _ in range(100):
            acc = acc + one
        sync()

    def scalar():
        return torch.tensor(1.0, dtype=torch.float32, device="cuda")

    def eager(one):
        (one + one).item()

    def to_gpu(host, n):
        torch.from_numpy(host).to("cuda").sum()
        sync()

    def resident(host, n):
        x = torch.from_numpy(host).to("cuda")
        sync()
        return x

    def to_host(x, one):
        bytes(memoryview((x + one).cpu().numpy()))

import numpy as np  # noqa: E402

labels = [("f32", "f32 (TF32 off)")] if tf32_off else [("bf16", "bf16"), ("f16", "f16"), ("f32", "f32 (TF32 on)")]
for key, label in labels:
    for n in (4096, 8192):
        a, b = matrix(n, types[key]), matrix(n, types[key])
        reps = 50 if n == 4096 else 20
        s = timed(lambda: matmul_once(a, b), reps, 3)["median"]
        row(f"matmul {label} {n}²", "TFLOP/s", 2 * n**3 / s / 1e12)
        if key == "bf16":
            # (Python frees each result at once anyway: the same measurement)
            s = timed(lambda: matmul_once(a, b), reps, 3)["median"]
            row(f"matmul {label} {n}², each result freed at once", "TFLOP/s", 2 * n**3 / s / 1e12)
            s = timed(lambda: matmul_ten(a, b), reps // 5, 3)["median"]
            row(f"matmul {label} {n}², 10 queued then evaluated", "TFLOP/s", 10 * 2 * n**3 / s / 1e12)
        del a, b

if not tf32_off and impl == "mlx":
    # bench.exs's stream rows: two independent chains of 20 products
    other = mx.new_stream(mx.gpu)
    a, b = matrix(1024, mx.bfloat16), matrix(1024, mx.bfloat16)

    def chains(stream):
        x, y = a, a
        for _ in range(20):
            x = x @ b
            y = mx.matmul(y, b, stream=stream)
        mx.eval(x, y)

    s = timed(lambda: chains(mx.gpu), 30, 3)["median"]
    row("2 chains of 20 matmuls bf16 1024², one stream", "µs", s * 1e6)
    s = timed(lambda: chains(other), 30, 3)["median"]
    row("2 chains of 20 matmuls bf16 1024², two streams", "µs", s * 1e6)

if not tf32_off:
    x = matrix(4, types["f32"]).reshape(16)
    s = timed(lambda: lazy_chain(x), 20, 3)["median"]
    row("lazy dispatch: 1,000 adds, then eval", "µs/op", s * 1e6 / 1000)
    one = scalar()
    big = matrix(1000, types["f32"]).reshape(1000000)
    s = timed(lambda: chain_big(big, one), 20, 3)["median"]
    row("lazy chain: 100 adds on 1M f32, then eval", "µs/op", s * 1e6 / 100)
    if impl == "mlx":

        def build_only(x):
            acc = x
            for _ in range(1000):
                acc = acc + x
            return acc.shape

        s = timed(lambda: build_only(x), 20, 3)["median"]
        row("lazy dispatch: building the graph only", "µs/op", s * 1e6 / 1000)
    one = scalar()
    s = timed(lambda: eager(one), 500, 20)["median"]
    row("eager: add + item", "µs", s * 1e6)
    for nbytes, label in ((1 << 20, "1 MB"), (256 << 20, "256 MB")):
        n = nbytes // 4
        host = np.ones(n, dtype=np.float32)
        reps = 10 if nbytes > 1 << 20 else 100
        s = timed(lambda: to_gpu(host, n), reps, 3)["median"]
        row(f"host → GPU {label} (made from host bytes, summed on the GPU)", "GB/s", nbytes / s / 1e9)
        x = resident(host, n)
        s = timed(lambda: to_host(x, one), reps, 3)["median"]
        row(f"GPU → host {label} (add on the GPU, every byte copied)", "GB/s", nbytes / s / 1e9)

with open(out, "w") as f:
    f.writelines(lines)
