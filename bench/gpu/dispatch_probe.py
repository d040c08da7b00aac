"""What MLX takes to queue a decoding step's rotary embedding and key/value
cache write, in Python mlx on the libmlx ExMLX uses: async_eval's host time
a call over 300 calls (bench/results/llm-gpu.md).

- Rotary embedding of a step's queries (bf16 {1, 32, 1, 64}): MLX's
  `fast.rope` with an s32 or s64 offset array, an integer offset, a base or
  frequencies; and the composed form with the tables given (Bumblebee's).
- Cache write of one position into a bf16 cache {1, 160, 32, 64}: MLX's
  dynamic `slice_update` with int32 starts, with an offset on one axis, and
  the way ExMLX writes Nx's `put_slice` with tensor starts (native/ex_mlx/
  core/src/ops/shape.rs: starts clamped in 64 bits against limits made in
  that type, narrowed to int32, then the dynamic `slice_update`).
- Attention of a step's query over a cache ({1, 32, 1, 128} against
  {1, 8 or 32, 160, 128}, bf16): MLX's `fast.scaled_dot_product_attention`
  with an additive mask array (the form a program of fixed shapes gives it:
  the whole cache, the positions not written masked), with no mask, and with
  no mask over the cache's written part only (mlx-lm's form). On CUDA an
  array mask leaves MLX's one-query kernel (`sdpa_vector`) for its composed
  fallback (two batched matrix products). The same masked attention composed
  without matrix products (products summed over the depth, then over the
  positions, in float32), plain and under `mx.compile` (as `fuse: true`
  runs a program's ops), beside the masked kernel under `mx.compile`.

- The masked attention with the cache stored as Bumblebee's is ({1, 160,
  32, 128}, read through a transposed view) beside mlx-lm's layout ({1, 32,
  160, 128}) and held once per key/value head ({1, 8, 160, 128}), plain and
  under `mx.compile` (`--layout-only`: these alone).
- The masked attention over a heads-first cache of all 32 heads or of the
  8 key/value heads, at depths 64 and 128, plain and under `mx.compile`
  (`--grouped-only`: this alone).

On the GPU machine, after `bench/gpu/run.sh unpack` (`--cpu`: MLX's CPU):

    PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda python3 bench/gpu/dispatch_probe.py
"""

import sys
import time

import mlx.core as mx

mx.set_default_device(mx.cpu if "--cpu" in sys.argv else mx.gpu)
N = int(__import__("os").environ.get("PROBE_CALLS", "300"))
H, D = 32, 64
LAYOUT_ONLY = "--layout-only" in sys.argv


def probe(name, f, inputs):
    for _ in range(2):
        mx.eval([f(x) for x in inputs[:20]])
    mx.synchronize()
    t0 = time.perf_counter()
    ys = [f(x) for x in inputs]
    t1 = time.perf_counter()
    mx.async_eval(ys)
    t2 = time.perf_counter()
    mx.eval(ys)
    mx.synchronize()
    t3 = time.perf_counter()
    print(f"{name}: build {(t1-t0)/N*1e6:.2f} us, async_eval {(t2-t1)/N*1e6:.2f} us, "
          f"to done {(t3-t1)/N*1e6:.2f} us a call", flush=True)


def layout():
    """The masked attention over a cache stored as Bumblebee's is,
    {1, T, heads, DH}, read through a transposed view (as a compiled
    program's step gives it to MLX), beside the same values stored
    {1, heads, T, DH} (mlx-lm's layout), plain and under `mx.compile`."""
    T, DH = 160, 128
    queries = [mx.random.normal((1, H, 1, DH)).astype(mx.bfloat16) for _ in range(N)]
    mask = mx.where(mx.arange(T) <= 37, 0.0, -mx.inf).astype(mx.bfloat16).reshape(1, 1, 1, T)
    stored = [mx.random.normal((1, T, H, DH)).astype(mx.bfloat16) for _ in range(2)]
    contiguous = [mx.contiguous(s.transpose(0, 2, 1, 3)) for s in stored]
    mx.eval(queries, mask, *stored, *contiguous)

    def attention(k, v):
        return lambda q: mx.fast.scaled_dot_product_attention(q, k, v, scale=DH**-0.5, mask=mask)

    views = attention(*(s.transpose(0, 2, 1, 3) for s in stored))
    heads_first = attention(*contiguous)
    probe("sdpa, mask, cache {1, T, H, DH} read transposed", views, queries)
    probe("sdpa, mask, cache {1, H, T, DH}", heads_first, queries)
    probe("sdpa, mask, cache {1, T, H, DH} read transposed, mx.compile", mx.compile(views), queries)
    probe("sdpa, mask, cache {1, H, T, DH}, mx.compile", mx.compile(heads_first), queries)
    diff = mx.abs(views(queries[0]).astype(mx.float32) - heads_first(queries[0]).astype(mx.float32))
    print(f"  the two layouts: largest difference {diff.max().item():.3g}")

    # the same cache held once per key/value head (8, grouped-query
    # attention: MLX's attention repeats them), heads-first
    grouped = [mx.contiguous(c[:, ::4]) for c in contiguous]
    mx.eval(*grouped)
    by_kv_head = attention(*grouped)
    probe("sdpa, mask, cache {1, KVH, T, DH}", by_kv_head, queries)
    probe("sdpa, mask, cache {1, KVH, T, DH}, mx.compile", mx.compile(by_kv_head), queries)


def grouped():
    """The masked attention of one query of 32 heads over a cache of 160
    positions, heads-first, holding all 32 heads or once per key/value head
    (8: MLX's attention repeats them), at a depth of 64 (the 1B shape's) and
    128 (the 8B shape's), plain and under `mx.compile`."""
    T, KVH = 160, 8
    mask = mx.where(mx.arange(T) <= 37, 0.0, -mx.inf).astype(mx.bfloat16).reshape(1, 1, 1, T)
    for DH in (64, 128):
        queries = [mx.random.normal((1, H, 1, DH)).astype(mx.bfloat16) for _ in range(N)]
        kv = [mx.random.normal((1, KVH, T, DH)).astype(mx.bfloat16) for _ in range(2)]
        repeated = [mx.contiguous(mx.repeat(c, H // KVH, axis=1)) for c in kv]
        mx.eval(queries, mask, *kv, *repeated)

        def attention(k, v):
            return lambda q: mx.fast.scaled_dot_product_attention(q, k, v, scale=DH**-0.5, mask=mask)

        for name, f in [(f"{H} heads", attention(*repeated)), (f"{KVH} key/value heads", attention(*kv))]:
            probe(f"sdpa, mask, depth {DH}, cache of {name}", f, queries)
            probe(f"sdpa, mask, depth {DH}, cache of {name}, mx.compile", mx.compile(f), queries)


def two_queries():
    """The masked attention of one query (MLX's composed fallback on CUDA)
    beside the same query given twice, whose masked attention MLX's CUDA
    backend hands to cuDNN (it keeps cuDNN from one-query attention with a
    mask array), its first row taken; the query broadcast to two rows or
    concatenated; caches of 32 heads and of 8 key/value heads, heads-first,
    160 positions, depths 64 and 128; plain and under `mx.compile`; and,
    for scale, the unmasked one-query kernel over the 38 written positions
    (mlx-lm's form)."""
    T = 160
    mask = mx.where(mx.arange(T) <= 37, 0.0, -mx.inf).astype(mx.bfloat16).reshape(1, 1, 1, T)
    for DH in (64, 128):
        queries = [mx.random.normal((1, H, 1, DH)).astype(mx.bfloat16) for _ in range(N)]
        for KVH in (H, 8):
            keys, values = (mx.random.normal((1, KVH, T, DH)).astype(mx.bfloat16) for _ in range(2))
            mx.eval(queries, mask, keys, values)

            def sdpa(q, k=keys, v=values, m=mask):
                return mx.fast.scaled_dot_product_attention(q, k, v, scale=DH**-0.5, mask=m)

            def broadcast(q):
                return sdpa(mx.broadcast_to(q, (1, H, 2, DH)))[:, :, :1]

            def concatenated(q):
                return sdpa(mx.concatenate([q, q], axis=2))[:, :, :1]

            written = (keys[:, :, :38], values[:, :, :38])
            mx.eval(*written)
            forms = [("one query", sdpa), ("two queries, broadcast", broadcast),
                     ("two queries, concatenated", concatenated),
                     ("one query, no mask, written positions", lambda q: sdpa(q, *written, None))]
            one = sdpa(queries[0]).astype(mx.float32)
            for name, f in forms:
                try:
                    probe(f"sdpa, mask, depth {DH}, {KVH} key heads, {name}", f, queries)
                    probe(f"sdpa, mask, depth {DH}, {KVH} key heads, {name}, mx.compile", mx.compile(f), queries)
                    d = mx.abs(f(queries[0]).astype(mx.float32) - one).max().item()
                    print(f"  {name} against one query: largest difference {d:.3g}")
                except RuntimeError as e:
                    print(f"sdpa, mask, depth {DH}, {KVH} key heads, {name}: MLX refused: {e}")


if "--two-queries-only" in sys.argv:
    two_queries()
    sys.exit(0)

if "--grouped-only" in sys.argv:
    grouped()
    sys.exit(0)

if LAYOUT_ONLY:
    layout()
    sys.exit(0)

# rotary embedding
inv = mx.array([10000.0 ** (-2 * i / D) for i in range(D // 2)], dtype=mx.float32)
freqs = 1 / inv
xs = [mx.random.normal((1, H, 1, D)).astype(mx.bfloat16) for _ in range(N)]
ang = 37 * inv
cos = mx.cos(mx.concatenate([ang, ang])).astype(mx.bfloat16)
sin = mx.sin(mx.concatenate([ang, ang])).astype(mx.bfloat16)
offsets = {t: mx.array([37], dtype=t) for t in (mx.int32, mx.int64)}
mx.eval(xs, freqs, cos, sin, *offsets.values())


def composed(x):
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + mx.concatenate([-x2, x1], axis=-1) * sin


def rope(offset, **kw):
    return lambda x: mx.fast.rope(x, D, traditional=False, scale=1.0, offset=offset, **kw)


probe("rope, offset an s32 array {1}, freqs", rope(offsets[mx.int32], base=None, freqs=freqs), xs)
probe("rope, offset an s64 array {1}, freqs", rope(offsets[mx.int64], base=None, freqs=freqs), xs)
probe("rope, integer offset, freqs", rope(37, base=None, freqs=freqs), xs)
probe("rope, integer offset, base", rope(37, base=10000.0), xs)
probe("composed rotary embedding, tables given", composed, xs)
ref = composed(xs[0]).astype(mx.float32)
got = rope(offsets[mx.int32], base=None, freqs=freqs)(xs[0]).astype(mx.float32)
print(f"rope against the composed form: largest difference {mx.abs(got - ref).max().item():.3g}")

# key/value cache write
cache = mx.zeros((1, 160, H, D), dtype=mx.bfloat16)
updates = [mx.random.normal((1, 1, H, D)).astype(mx.bfloat16) for _ in range(N)]
starts = {t: mx.array([0, 37, 0, 0], dtype=t) for t in (mx.int32, mx.int64)}
offset32 = mx.array([37], dtype=mx.int32)
mx.eval(cache, updates, offset32, *starts.values())


def clamped(s):
    limits = mx.array([0, 159, 0, 0], dtype=mx.int64)
    zero = mx.array(0, dtype=mx.int64)
    return mx.minimum(mx.maximum(s.astype(mx.int64), zero), limits).astype(mx.int32)


axes = (0, 1, 2, 3)
probe("slice_update, int32 starts", lambda u: mx.slice_update(cache, u, starts[mx.int32], axes), updates)
probe("slice_update, int32 offset on axis 1", lambda u: mx.slice_update(cache, u, offset32, (1,)), updates)
probe("ExMLX's put_slice, int64 starts", lambda u: mx.slice_update(cache, u, clamped(starts[mx.int64]), axes), updates)
probe("ExMLX's put_slice, int32 starts", lambda u: mx.slice_update(cache, u, clamped(starts[mx.int32]), axes), updates)

# attention of one query over the cache
T, DH = 160, 128
queries = [mx.random.normal((1, H, 1, DH)).astype(mx.bfloat16) for _ in range(N)]
mask = mx.where(mx.arange(T) <= 37, 0.0, -mx.inf).astype(mx.bfloat16).reshape(1, 1, 1, T)
mx.eval(queries, mask)
for kv in (H, H // 4):
    keys = mx.random.normal((1, kv, T, DH)).astype(mx.bfloat16)
    values = mx.random.normal((1, kv, T, DH)).astype(mx.bfloat16)
    mx.eval(keys, values)

    def attention(m, k=keys, v=values):
        return lambda q: mx.fast.scaled_dot_product_attention(q, k, v, scale=DH**-0.5, mask=m)

    probe(f"sdpa, {kv} key heads, additive mask array", attention(mask), queries)
    probe(f"sdpa, {kv} key heads, no mask", attention(None), queries)
    written = (keys[:, :, :38], values[:, :, :38])
    mx.eval(*written)
    probe(f"sdpa, {kv} key heads, no mask, the 38 written positions", attention(None, *written), queries)
    masked = attention(mask)(queries[0]).astype(mx.float32)
    sliced = attention(None, *written)(queries[0]).astype(mx.float32)
    print(f"  masked against sliced: largest difference {mx.abs(masked - sliced).max().item():.3g}")

# the masked one-query attention without matrix products (32 key heads)
keys = mx.random.normal((1, H, T, DH)).astype(mx.bfloat16)
values = mx.random.normal((1, H, T, DH)).astype(mx.bfloat16)
mx.eval(keys, values)


def by_sums(q):
    f32 = mx.float32
    scores = (q.astype(f32) * keys.astype(f32)).sum(-1) * DH**-0.5
    weights = mx.softmax(scores + mask.reshape(1, 1, T).astype(f32), axis=-1)
    out = (weights[..., None] * values.astype(f32)).sum(-2, keepdims=True)
    return out.astype(q.dtype)


def masked(q):
    return mx.fast.scaled_dot_product_attention(q, keys, values, scale=DH**-0.5, mask=mask)


probe("masked attention by sums", by_sums, queries)
probe("masked attention by sums, mx.compile", mx.compile(by_sums), queries)
probe("sdpa, additive mask array, mx.compile", mx.compile(masked), queries)
diff = mx.abs(by_sums(queries[0]).astype(mx.float32) - masked(queries[0]).astype(mx.float32)).max()
print(f"  by sums against sdpa: largest difference {diff.item():.3g}")

layout()
