"""What a product's weight layout and an op cost in MLX on a GPU, in Python
mlx (bench/results/llm-gpu.md, "what an op and a weight's layout cost"):
one bf16 row times a matrix stored {in, out} (x @ w) and stored {out, in}
(x @ w.T), 100 products queued then waited for; async_eval of a chain of
element-wise ops and of reshapes. On the GPU machine, after
`bench/gpu/run.sh unpack`:

    PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda python3 bench/gpu/mlx_layout.py
"""

import time

import mlx.core as mx

mx.set_default_device(mx.gpu)
def bench(f, reps=100):
    for _ in range(3): mx.eval([f() for _ in range(10)])
    mx.synchronize()
    t = time.perf_counter()
    mx.eval([f() for _ in range(reps)])
    mx.synchronize()
    return (time.perf_counter() - t) / reps * 1e6
for (k, n) in [(4096, 4096), (4096, 14336), (14336, 4096), (2048, 8192), (2048, 128256)]:
    x = mx.random.normal((1, k)).astype(mx.bfloat16)
    w_io = mx.random.normal((k, n)).astype(mx.bfloat16)
    w_oi = mx.random.normal((n, k)).astype(mx.bfloat16)
    mx.eval(x, w_io, w_oi)
    a = bench(lambda: x @ w_io)
    b = bench(lambda: x @ w_oi.T)
    gb = k * n * 2 / 1e9
    print(f"K={k} N={n}: x@W(in,out) {a:.1f} us {gb/a*1e6:.0f} GB/s | x@W(out,in).T {b:.1f} us {gb/b*1e6:.0f} GB/s", flush=True)
# per-kernel cost: a chain of small element-wise ops
y0 = mx.ones((1, 2048), dtype=mx.bfloat16); mx.eval(y0)
for n in [100, 1000]:
    def chain():
        y = y0
        for i in range(n):
            y = y * 1.0001 if i % 2 else y + 0.5
        return y
    mx.eval(chain()); mx.synchronize()
    t = time.perf_counter(); y = chain(); t1 = time.perf_counter(); mx.async_eval(y); t2 = time.perf_counter(); mx.eval(y); mx.synchronize(); t3 = time.perf_counter()
    print(f"chain of {n}: build {(t1-t)/n*1e6:.2f} us/op, async_eval {(t2-t1)/n*1e6:.2f} us/op, to done {(t3-t1)/n*1e6:.2f} us/op", flush=True)
# reshape/transpose nodes: views
for n in [1000]:
    def views():
        y = y0
        for i in range(n):
            y = y.reshape(2048, 1) if i % 2 == 0 else y.reshape(1, 2048)
        return y + 1
    mx.eval(views()); mx.synchronize()
    t = time.perf_counter(); y = views(); t1 = time.perf_counter(); mx.async_eval(y); t2 = time.perf_counter(); mx.eval(y); mx.synchronize(); t3 = time.perf_counter()
    print(f"reshape chain of {n}: async_eval {(t2-t1)/n*1e6:.2f} us/op, to done {(t3-t1)/n*1e6:.2f} us/op", flush=True)
