"""Python mlx reference for bench/defn.exs: the same programs, plain (ops
dispatched from Python, evaluated at the end) and with mx.compile, on the
CPU. Each call ends by evaluating the result and copying its bytes out, as
the Elixir side reads its results. Prints one JSON object: per program,
seconds per call ({"plain": s, "compiled": s}). `--quick` shrinks sizes and
repetitions.

`--serve` times on request instead, so that bench/defn.exs can alternate
with it: each line read, `NAME VARIANT REPS WARM_UP_MS` (VARIANT `plain` or
`compiled`), is answered with one line of JSON, {"median": s} (null where
the program has no such variant); a line `quit` or the end of input ends it.
"""
import json
import math
import sys
import time

import mlx.core as mx

from timing import timed

QUICK = "--quick" in sys.argv
REPS = 5 if QUICK else 15
FEW = 2 if QUICK else 5
# seconds each program runs before it is timed (bench/defn.exs's @warm_up_ms)
WARM_UP = 0 if QUICK else 0.2


def warm_up(fun, seconds=WARM_UP):
    """Calls `fun` for `seconds` (at least once), as bench/defn.exs does
    before each of its rows."""
    start = time.perf_counter()
    fun()
    while time.perf_counter() - start < seconds:
        fun()


def read(out):
    outs = out if isinstance(out, (tuple, list)) else [out]
    flat = []
    for o in outs:
        flat.extend(o if isinstance(o, (tuple, list)) else [o])
    mx.eval(*flat)
    for o in flat:
        bytes(memoryview(o))


def mlp(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = mx.maximum(x @ w1 + b1, 0)
    h = mx.maximum(h @ w2 + b2, 0)
    return h @ w3 + b3


def loss(params, x, labels):
    logits = mlp(params, x)
    shifted = logits - mx.max(logits, axis=1, keepdims=True)
    log_probs = shifted - mx.log(mx.sum(mx.exp(shifted), axis=1, keepdims=True))
    return -mx.mean(mx.sum(log_probs * labels, axis=1))


grad_fn = mx.value_and_grad(loss)


def train_step(params, x, labels):
    value, grads = grad_fn(params, x, labels)
    return value, tuple(p - 0.1 * g for p, g in zip(params, grads))


def small_loop(x):
    for _ in range(1000):
        x = x * 0.999 + 0.001
    return x


def small_loop_compiled_step():
    step = mx.compile(lambda x: x * 0.999 + 0.001)

    def run(x):
        for _ in range(1000):
            x = step(x)
        return x

    return run


def chain20(x):
    for _ in range(5):
        x = mx.tanh(x * 1.1 + 0.1) * 0.9 - 0.01
    return x


def layer_norm(x):
    mean = mx.mean(x, axis=1, keepdims=True)
    c = x - mean
    return c * mx.rsqrt(mx.mean(c * c, axis=1, keepdims=True) + 1e-5)


def block(x, w):
    wq, wk, wv, wo, w1, w2 = w
    seq, width = x.shape
    h = layer_norm(x)

    def heads(t):
        return t.reshape(seq, 4, width // 4).transpose(1, 0, 2)

    q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
    scores = (q @ k.transpose(0, 2, 1)) / math.sqrt(width // 4)
    scores = scores - mx.max(scores, axis=2, keepdims=True)
    weights = mx.exp(scores) / mx.sum(mx.exp(scores), axis=2, keepdims=True)
    attended = (weights @ v).transpose(1, 0, 2).reshape(seq, width)
    x = x + attended @ wo
    u = layer_norm(x) @ w1
    return x + (u * mx.sigmoid(1.702 * u)) @ w2


def rows(buffer):
    for i in range(3001):
        buffer[i] = mx.full((400,), float(i))
    return buffer


def sum_all(params):
    """The sum of a tuple of arrays (bench/defn.exs's sum_all: 300 arguments)."""
    total = params[0]
    for p in params[1:]:
        total = total + p
    return total


def warm_up_gpu():
    """About a second of matrix products before the first timed row, as
    bench/gpu/defn.exs does, so that no row starts on an idle GPU."""
    a = mx.random.normal((2048, 2048))
    warm_up(lambda: mx.eval(a @ a), 1.0)


def main():
    # (--gpu: bench/gpu/defn.exs's reference, on the GPU)
    mx.set_default_device(mx.gpu if "--gpu" in sys.argv else mx.cpu)
    mx.random.seed(7)

    def params(shapes):
        out = []
        for i, o in shapes:
            out += [mx.random.normal((i, o)) / math.sqrt(i), mx.zeros((o,))]
        return tuple(out)

    p = params([(784, 512), (512, 512), (512, 10)])
    x64 = mx.random.uniform(shape=(64, 784))
    x1 = x64[0:1]
    labels = (mx.arange(10)[None, :] == (mx.arange(64) % 10)[:, None]).astype(mx.float32)
    chain_x = mx.random.uniform(shape=(65536 if QUICK else 1048576,))
    block_x = mx.random.normal((128, 256))
    shapes = [(256, 256)] * 4 + [(256, 1024), (1024, 256)]
    block_w = tuple(mx.random.normal(s) / math.sqrt(s[0]) for s in shapes)
    bf16 = lambda ts: tuple(t.astype(mx.bfloat16) for t in ts)
    mx.eval(p, x64, labels, chain_x, block_x, block_w)
    if "--gpu" in sys.argv:
        warm_up_gpu()

    cases = {
        "mlp_b1": (mlp, (p, x1), REPS),
        "mlp_b64": (mlp, (p, x64), REPS),
        "train_b64": (train_step, (p, x64, labels), FEW),
        "loop_1000": (small_loop, (mx.arange(16).astype(mx.float32),), FEW),
        "chain20": (chain20, (chain_x,), FEW),
        "block_f32": (block, (block_x, block_w), FEW),
        "block_bf16": (block, (block_x.astype(mx.bfloat16), bf16(block_w)), FEW),
        "args_300": (sum_all, (tuple(mx.array([i * 1.0]) for i in range(1, 301)),), FEW),
    }
    # per program: its calls, plain and compiled, and its repetitions
    calls = {}
    for name, (fun, args, reps) in cases.items():
        compiled = small_loop_compiled_step() if name == "loop_1000" else mx.compile(fun)
        calls[name] = (
            {
                "plain": lambda fun=fun, args=args: read(fun(*args)),
                "compiled": lambda compiled=compiled, args=args: read(compiled(*args)),
            },
            reps,
        )
    # the row loop writes into its buffer in place; a fresh buffer per call
    calls["rows_3001"] = ({"plain": lambda: read(rows(mx.zeros((3001, 400))))}, 2)

    if "--serve" in sys.argv:
        serve(calls)
        return

    out = {"mlx": mx.__version__}
    for name, (variants, reps) in calls.items():
        out[name] = {"plain": None, "compiled": None}
        for variant, call in variants.items():
            warm_up(call)
            out[name][variant] = timed(call, reps)["median"]
    print(json.dumps(out))


def serve(calls):
    """Answers `NAME VARIANT REPS WARM_UP_MS` lines (module docstring)."""
    print(json.dumps({"ready": True, "mlx": mx.__version__}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if words == ["quit"]:
            break
        name, variant, reps, warm_ms = words
        call = calls.get(name, ({}, 0))[0].get(variant)
        if call is None:
            print(json.dumps({"median": None}), flush=True)
            continue
        warm_up(call, int(warm_ms) / 1000)
        print(json.dumps({"median": timed(call, int(reps))["median"]}), flush=True)


main()
