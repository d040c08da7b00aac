"""What MLX's `fast.rope` costs to queue on a GPU, beside the composed
rotary embedding (Bumblebee's form): async_eval's host time per call, for a
decoding step's queries (bf16, {1, heads, 1, d}), with a scalar offset, a
one-entry offset array, frequencies or a base; and the values against the
composed form. On the GPU machine, after `bench/gpu/run.sh unpack`:

    PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda python3 bench/gpu/rope_probe.py
"""

import time

import mlx.core as mx

mx.set_default_device(mx.gpu)
H, D, N = 32, 64, 500
inv = mx.array([10000.0 ** (-2 * i / D) for i in range(D // 2)], dtype=mx.float32)
freqs = 1 / inv
xs = [mx.random.normal((1, H, 1, D)).astype(mx.bfloat16) for _ in range(N)]
off_arr = mx.array([37], dtype=mx.int64)
off_arr32 = mx.array([37], dtype=mx.int32)
off_scalar_arr = mx.array(37, dtype=mx.int32)
ang = 37 * inv
cos = mx.cos(mx.concatenate([ang, ang])).astype(mx.bfloat16)
sin = mx.sin(mx.concatenate([ang, ang])).astype(mx.bfloat16)
mx.eval(xs, off_arr, off_arr32, off_scalar_arr, freqs, cos, sin)


def composed(x):
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + mx.concatenate([-x2, x1], axis=-1) * sin


cases = {
    "rope, int offset, base": lambda x: mx.fast.rope(x, D, traditional=False, base=10000.0, scale=1.0, offset=37),
    "rope, int offset, freqs": lambda x: mx.fast.rope(x, D, traditional=False, base=None, scale=1.0, offset=37, freqs=freqs),
    "rope, offset array {1} s64, freqs": lambda x: mx.fast.rope(x, D, traditional=False, base=None, scale=1.0, offset=off_arr, freqs=freqs),
    "rope, offset array {1} s32, freqs": lambda x: mx.fast.rope(x, D, traditional=False, base=None, scale=1.0, offset=off_arr32, freqs=freqs),
    "rope, offset array {} s32, freqs": lambda x: mx.fast.rope(x, D, traditional=False, base=None, scale=1.0, offset=off_scalar_arr, freqs=freqs),
    "composed (x*cos + rotate_half(x)*sin)": composed,
}
ref = composed(xs[0]).astype(mx.float32)
for name, f in cases.items():
    for _ in range(2):
        mx.eval([f(x) for x in xs[:20]])
    mx.synchronize()
    t0 = time.perf_counter()
    ys = [f(x) for x in xs]
    t1 = time.perf_counter()
    mx.async_eval(ys)
    t2 = time.perf_counter()
    mx.eval(ys)
    mx.synchronize()
    t3 = time.perf_counter()
    diff = mx.abs(f(xs[0]).astype(mx.float32) - ref).max().item()
    print(f"{name}: build {(t1-t0)/N*1e6:.2f} us, async_eval {(t2-t1)/N*1e6:.2f} us, to done {(t3-t1)/N*1e6:.2f} us a call; max diff vs composed {diff:.3g}", flush=True)
