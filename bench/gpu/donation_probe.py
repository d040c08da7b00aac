"""Whether MLX writes a loop's cache in place when the next step is queued
while the step before it still runs (bench/results/llm-gpu.md, "The quantized
step's timeline"; docs/decisions/0025-every-pipelined-state-written-in-place.md):

    PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda python3 bench/gpu/donation_probe.py [--cpu] [--steps N]

A step writes one row of a cache (at the step's position: bounds of constant
values, as mlx-lm's cache writes, or a position given as an array) and
reads the cache (a sum over all of it), as a decoding step writes its
key/value cache and attends over it. Each form runs the same steps and prints
the peak memory above its start in caches: about 0 where every write took over
the cache's buffer, about 1 or more where writes copied it.

Forms:
- pipelined: step n+1 queued (`async_eval`) before waiting for step n, as
  mlx-lm's `generate_step` does;
- drained: each step waited for and the stream synchronized before the next
  is queued (ExMLX's pipelined loops, decision 0025);
- pipelined, step before held / drained, step before held: as pipelined or
  drained, with a view of step n's cache kept until step n+1 is queued (as a
  loop's state held while the next step is built);
- pipelined, dynamic write: as pipelined, the position given as an array;
- pipelined, compiled: that step under `mx.compile`, cache in and cache out.
"""

import argparse

import mlx.core as mx


def step(cache, row, position):
    # (a write at a position given as an array: MLX's dynamic slice update)
    cache = mx.slice_update(cache, row, start_indices=position, axes=[0])
    return cache, cache.sum()


def static_step(cache, row, i):
    # (a write of constant bounds, as mlx-lm's cache writes its rows)
    cache[i : i + 1] = row
    return cache, cache.sum()


def run(form, rows, width, steps):
    cache = mx.zeros((rows, width))
    w = mx.random.normal((width, width))
    mx.eval(cache, w)
    mx.synchronize()
    mx.reset_peak_memory()
    start = mx.get_active_memory()
    dynamic = form.endswith("dynamic write") or form.endswith("compiled")
    body = mx.compile(step) if form.endswith("compiled") else step
    before, held = None, None
    for i in range(steps):
        row = (mx.full((1, width), float(i)) @ w) / width
        if form.endswith("step before held"):
            # (a lazy view: it holds step n's cache array, whichever Python
            # object names the cache next)
            held = cache[0:1]
        if dynamic:
            cache, score = body(cache, row, mx.array([i]))
        else:
            cache, score = static_step(cache, row, i)
        mx.async_eval(cache, score)
        held = None
        if form.startswith("drained"):
            score.item()
            mx.synchronize()
        elif before is not None:
            before.item()
        before = score
    mx.eval(cache, score)
    mx.synchronize()
    got = cache[:steps, 0]
    want = (mx.arange(steps).reshape(steps, 1) * mx.ones((1, width)) @ w)[:, 0] / width
    exact = mx.allclose(got, want, rtol=1e-3, atol=1e-3).item()
    return (mx.get_peak_memory() - start) / (rows * width * 4), exact


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="MLX's CPU instead of its GPU")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--width", type=int, default=4096)
    args = parser.parse_args()
    mx.set_default_device(mx.cpu if args.cpu else mx.gpu)
    print(f"MLX {mx.__version__} on {mx.default_device()}: a cache of "
          f"{args.rows * args.width * 4 / 2**20:.0f} MiB, {args.steps} steps")
    forms = [
        "pipelined",
        "drained",
        "pipelined, step before held",
        "drained, step before held",
        "pipelined, dynamic write",
        "pipelined, compiled",
    ]
    for form in forms:
        caches, exact = run(form, args.rows, args.width, args.steps)
        print(f"{form}: peak above the start {caches:.2f} caches; rows written right: {exact}")


if __name__ == "__main__":
    main()
