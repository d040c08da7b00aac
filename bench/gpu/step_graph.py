"""What one decoding step gives MLX to run: the step's graph, node by node,
and MLX's host time to build and queue it, for mlx-lm beside ExMLX
(bench/results/llm-gpu.md, "A step's graph").

    step_graph.py run MODEL_DIR PREFIX [--steps N] [--cpu]
        mlx-lm's model from MODEL_DIR, greedy after a 32-token prompt, with
        its own cache and with integration/scripts/llm_reference.py's
        FixedCache (the whole cache and a mask each step, as a program of
        fixed shapes has it), each pipelined as mlx-lm's generate_step is.
        For each: the graph of its 4th step in MLX's DOT form
        (PREFIX.mlx-lm.dot, PREFIX.mlx-lm-fixed.dot), and the host time a
        step spends building its graph (Python) and in `async_eval`. Then
        the prompt's pass over 32 and 512 tokens without a cache, as
        integration/bench/llm.exs's prefill rows time it: its graph
        (PREFIX.mlx-lm-prefill-N.dot) and the same host times.

    step_graph.py count FILE...
        the nodes of each graph by primitive, side by side: MLX DOT files
        (`mx.export_to_dot`) and `print_graph` files (ExMLX's
        `EXMLX_STEP_GRAPH`, native/ex_mlx/core/src/step_graph.rs: a loop's
        step as PREFIX.N.txt, a program without loops as
        PREFIX.program.N.txt).

On the GPU machine, after `bench/gpu/run.sh unpack` and an `llm` run that
made the model:

    PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda:/tmp/exmlx-gpu/mlx-lm \\
      python3 bench/gpu/step_graph.py run integration/data/llm/llama-1b-bfloat16 OUT/sg
"""

import collections
import os
import re
import statistics
import sys
import time

PROMPT = 32
GRAPH_STEP = 4


def run(directory, prefix, steps, cpu):
    from pathlib import Path

    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load_model

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../integration/scripts"))
    from llm_reference import FixedCache, prompt_ids

    mx.set_default_device(mx.cpu if cpu else mx.gpu)
    model, _ = load_model(Path(directory))
    mx.eval(model.parameters())
    vocab = model.args.vocab_size
    dtype = model.model.norm.weight.dtype
    caches = {
        "mlx-lm": lambda: make_prompt_cache(model),
        "mlx-lm-fixed": lambda: [FixedCache(mx, PROMPT + steps + 1, dtype) for _ in model.layers],
    }
    for name, make in caches.items():
        for attempt in range(2):
            cache = make()

            def step(ids):
                return mx.argmax(model(ids, cache=cache)[:, -1, :], axis=-1)

            y = step(mx.array([prompt_ids(vocab, PROMPT)]))
            mx.eval(y)
            built, queued = [], []
            for k in range(steps):
                t0 = time.perf_counter()
                following = step(y[:, None])
                t1 = time.perf_counter()
                if attempt == 1 and k == GRAPH_STEP:
                    state = [a for c in cache for a in (c.keys, c.values)]
                    mx.export_to_dot(f"{prefix}.{name}.dot", following, *state)
                mx.async_eval(following)
                t2 = time.perf_counter()
                built.append(t1 - t0)
                queued.append(t2 - t1)
                y.item()
                y = following
            mx.eval(y)
        print(f"{name}: a step's building {statistics.median(built) * 1e3:.2f} ms, "
              f"async_eval {statistics.median(queued) * 1e3:.2f} ms (medians of {steps})")
    for tokens in [32, 512]:
        ids = mx.array([prompt_ids(vocab, tokens)])
        built, queued = [], []
        for k in range(4):
            t0 = time.perf_counter()
            logits = model(ids)
            t1 = time.perf_counter()
            if k == 1:
                mx.export_to_dot(f"{prefix}.mlx-lm-prefill-{tokens}.dot", logits)
            mx.async_eval(logits)
            t2 = time.perf_counter()
            mx.eval(logits)
            if k > 0:
                built.append(t1 - t0)
                queued.append(t2 - t1)
        print(f"prefill of {tokens} tokens: building {statistics.median(built) * 1e3:.2f} ms, "
              f"async_eval {statistics.median(queued) * 1e3:.2f} ms (medians of 3)")


def primitives(path):
    text = open(path).read()
    if path.endswith(".dot"):
        return collections.Counter(re.findall(r'\[label ="([^"]+)", shape=rectangle\]', text))
    lines = text.splitlines()[2:]
    return collections.Counter(line.split(" ", 1)[0] for line in lines if line)


def count(paths):
    counts = [primitives(p) for p in paths]
    names = sorted(set().union(*counts), key=lambda n: -max(c[n] for c in counts))
    print("| primitive | " + " | ".join(os.path.basename(p) for p in paths) + " |")
    print("|---|" + "---:|" * len(paths))
    for n in names:
        print(f"| {n} | " + " | ".join(str(c[n]) for c in counts) + " |")
    print("| **all** | " + " | ".join(str(sum(c.values())) for c in counts) + " |")


def main(argv):
    if argv[:1] == ["run"] and len(argv) >= 3:
        steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 64
        run(argv[1], argv[2], steps, "--cpu" in argv)
    elif argv[:1] == ["count"] and len(argv) >= 2:
        count(argv[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
