"""Language-model references for bench/llm.exs: a random-initialized
Llama-shaped model made with transformers from a config (no hub), and its
greedy generation and prefill timed with PyTorch and, where importable, mlx-lm.

    llm_reference.py make DIR SHAPE DTYPE     # SHAPE: a name below or a config.json path
    llm_reference.py run DIR DEVICE PROMPT NEW [--quick] [--bits N] [--ptx-dir DIR]
    llm_reference.py greedy DIR DEVICE PROMPT NEW

`make` writes DIR (config.json as Hub checkpoints have it, model.safetensors)
unless DIR/config.json exists. `run` prints one JSON line per runtime, then a
line `{"done": true}`. `greedy` prints one line for PyTorch alone: the last
prompt position's logits (a file), NEW greedy tokens, and at each step the
largest logit, the gap between the top two and the largest magnitude, the
references of the GPU logits test. Decode tokens/s is (NEW - 1) / (t(NEW) - t(1)), the best
of the repetitions; prefill is one forward pass of a prompt, the median.
"""

import gc
import json
import os
import statistics
import sys
import time

SHAPES = {
    # the CPU rows' model: small enough for a 2-core machine
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                  vocab_size=32000, tie_word_embeddings=False),
    "llama-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                     vocab_size=128256, tie_word_embeddings=True),
    "llama-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     vocab_size=128256, tie_word_embeddings=False),
}


def emit(**fields):
    print(json.dumps(fields), flush=True)


def save_logits(directory, runtime, logits):
    """The last prompt position's logits as little-endian float32 in a file
    beside the model; its path."""
    path = os.path.join(directory, f"logits-{runtime}.f32")
    logits.astype("<f4").tofile(path)
    return path


def make(directory, shape, dtype):
    if os.path.exists(os.path.join(directory, "config.json")):
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if shape in SHAPES:
        config = LlamaConfig(max_position_embeddings=4096, rope_theta=500000.0, **SHAPES[shape])
    else:
        config = LlamaConfig.from_json_file(shape)
    torch.manual_seed(0)
    # (made on the GPU where there is one: an 8B model's float32 draws take
    # minutes on a CPU)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(getattr(torch, dtype))
        for p in model.parameters():
            p.data.normal_(0, 0.02)
    model.save_pretrained(directory, safe_serialization=True)
    # as Hub checkpoints have it: rope_theta at the top level, no null pad_token_id
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        saved = json.load(f)
    rope = saved.get("rope_parameters") or {}
    if saved.get("rope_theta") is None and "rope_theta" in rope:
        saved["rope_theta"] = rope["rope_theta"]
    if "pad_token_id" in saved and saved["pad_token_id"] is None:
        del saved["pad_token_id"]
    with open(path, "w") as f:
        json.dump(saved, f, indent=1)
    emit(made=directory, params=sum(p.numel() for p in model.parameters()))


def host_memory():
    """This process's resident and peak resident bytes (Linux /proc)."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def host_memory_of(load):
    """Runs `load`; its result, and the host memory it took: the peak resident
    bytes above those before it and the resident bytes it left, in GB (None
    where the kernel does not let the peak be reset)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to VmRSS
        before, _ = host_memory()
    except OSError:
        before = None
    result = load()
    if before is None:
        return result, None, None
    after, peak = host_memory()
    return result, (peak - before) / 1e9, (after - before) / 1e9


def prompt_ids(vocab, n):
    # the same ids as ExMLX.Integration.prompt_ids/2 makes
    return [(i * 7919 + 13) % vocab for i in range(n)]


def decode_rate(generate, new, reps):
    generate(8)
    full = min(generate(new)[0] for _ in range(reps))
    one = min(generate(1)[0] for _ in range(reps))
    return (new - 1) / (full - one), full


def run_torch(directory, device, prompt, new, reps):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(os.cpu_count())
    torch.zeros(1, device=device).sum().item()  # the device started before loading
    start = time.time()
    model, host_peak, host_kept = host_memory_of(
        lambda: AutoModelForCausalLM.from_pretrained(directory).to(device).eval())
    load_s = time.time() - start
    vocab = model.config.vocab_size
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def prefill(n):
        ids = torch.tensor([prompt_ids(vocab, n)], device=device)
        times = []
        with torch.no_grad():
            model(ids)
            for _ in range(reps):
                t = time.time()
                model(ids).logits[:, -1].float().cpu()
                sync()
                times.append(time.time() - t)
        return statistics.median(times)

    ids = torch.tensor([prompt_ids(vocab, prompt)], device=device)
    tokens = None
    rows = {}
    for cache in ["dynamic", "static"]:
        def generate(n, cache=cache):
            kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
            if cache == "static":
                kw["cache_implementation"] = "static"
            t = time.time()
            with torch.no_grad():
                out = model.generate(ids, **kw)
            sync()
            return time.time() - t, out[0, prompt:].tolist()

        try:
            rate, _ = decode_rate(generate, new, reps)
            rows[cache] = round(rate, 1)
            if tokens is None:
                tokens = generate(new)[1]
        except Exception as e:  # a cache kind this transformers lacks
            rows[cache] = None
            emit(runtime="torch", cache=cache, error=str(e)[:200])
    peak = torch.cuda.max_memory_allocated() / 1e9 if device == "cuda" else None
    with torch.no_grad():
        logits = model(ids).logits[0, -1].float().cpu().numpy()
    emit(runtime="torch", version=torch.__version__, threads=torch.get_num_threads(),
         logits=save_logits(directory, "torch", logits),
         decode_dynamic=rows.get("dynamic"), decode_static=rows.get("static"),
         prefill_32_s=prefill(32), prefill_512_s=prefill(512), load_s=load_s,
         load_host_peak_gb=host_peak, load_host_kept_gb=host_kept, peak_gb=peak, tokens=tokens)
    del model
    gc.collect()


def run_mlx_lm(directory, device, prompt, new, reps, bits=None, ptx_dir=None):
    try:
        import mlx.core as mx
        from mlx_lm.generate import generate_step
        from mlx_lm.utils import load_model
    except ImportError as e:
        emit(runtime="mlx-lm", error=f"not importable: {e}")
        return
    from pathlib import Path

    mx.set_default_device(mx.gpu if device == "cuda" else mx.cpu)
    mx.eval(mx.zeros(1) + 1)  # the device started before loading
    def load():
        model, _ = load_model(Path(directory))
        mx.eval(model.parameters())
        return model

    start = time.time()
    model, host_peak, host_kept = host_memory_of(load)
    load_s = time.time() - start
    if bits:
        # mlx-lm's quantization: every linear and embedding layer, groups of 64
        import mlx.nn as nn

        nn.quantize(model, group_size=64, bits=bits)
        mx.eval(model.parameters())
    vocab = model.args.vocab_size

    def generate(n):
        tokens = []
        t = time.time()
        for token, _ in generate_step(mx.array(prompt_ids(vocab, prompt)), model, max_tokens=n):
            tokens.append(int(token))
        return time.time() - t, tokens

    def prefill(n):
        ids = mx.array([prompt_ids(vocab, n)])
        mx.eval(model(ids))
        times = []
        for _ in range(reps):
            t = time.time()
            mx.eval(model(ids)[:, -1])
            times.append(time.time() - t)
        return statistics.median(times)

    # the first generation call (its graphs built, MLX's compiled functions
    # traced and their kernel modules built with NVRTC where none is cached),
    # timed as ExMLX's first call is
    ptx_before = ptx_modules(ptx_dir)
    first_s = generate(new)[0]
    ptx_first = None if ptx_before is None else ptx_modules(ptx_dir) - ptx_before
    # the peak of the generations alone (the prefill rows come after)
    mx.reset_peak_memory()
    rate, _ = decode_rate(generate, new, reps)
    tokens = generate(new)[1]
    peak_gb = mx.get_peak_memory() / 1e9
    fixed_rate, fixed_tokens = fixed_cache_decode(mx, model, vocab, prompt, new, reps)
    step_profile = mlx_lm_step_profile(mx, model, vocab, prompt, new)
    logits = model(mx.array([prompt_ids(vocab, prompt)]))[0, -1].astype(mx.float32)
    mx.eval(logits)
    emit(runtime="mlx-lm", version=__import__("mlx_lm").__version__, decode=round(rate, 1),
         logits=save_logits(directory, "mlx-lm", __import__("numpy").array(logits)),
         prefill_32_s=prefill(32), prefill_512_s=prefill(512), load_s=load_s,
         load_host_peak_gb=host_peak, load_host_kept_gb=host_kept,
         peak_gb=peak_gb, active_gb=mx.get_active_memory() / 1e9,
         tokens=tokens, decode_fixed_cache=round(fixed_rate, 1),
         fixed_cache_tokens_equal=fixed_tokens == tokens, step_profile=step_profile,
         first_s=first_s, ptx_at_start=ptx_before, ptx_first=ptx_first)


def ptx_modules(directory):
    """How many kernel modules MLX's CUDA backend holds in its disk cache
    `directory` (one `.ptx` file each; integration/bench/llm.exs names the
    folder with `--ptx-dir`); None without one."""
    if directory is None:
        return None
    from pathlib import Path

    return sum(1 for _ in Path(directory).rglob("*.ptx"))


def mlx_lm_step_profile(mx, model, vocab, prompt, new):
    """Where a decoding step of mlx-lm's goes on the host, in a generation
    run as mlx_lm.generate.generate_step runs one (its cache, its stream,
    log-probabilities and a greedy choice, step n+1 queued before step n's
    token is read), timed per step: building the step's graph in Python,
    MLX's async_eval of it, and waiting for the token before it. Medians
    over the steps, in seconds: the figures beside ExMLX's loop profile."""
    from mlx_lm.generate import generation_stream as stream
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    build, queue, wait = [], [], []

    def step(ids):
        with mx.stream(stream):
            logits = model(ids[None], cache=cache)[:, -1, :]
            logprobs = logits - mx.logsumexp(logits, keepdims=True)
            return mx.argmax(logprobs, axis=-1), logprobs.squeeze(0)

    with mx.stream(stream):
        ids = mx.array(prompt_ids(vocab, prompt))
        model(ids[None, :-1], cache=cache)
        mx.eval([c.state for c in cache])
    y, logprobs = step(ids[-1:])
    mx.async_eval(y, logprobs)
    for _ in range(new - 1):
        t0 = time.perf_counter()
        following = step(y)
        t1 = time.perf_counter()
        mx.async_eval(*following)
        t2 = time.perf_counter()
        y.item()
        t3 = time.perf_counter()
        build.append(t1 - t0)
        queue.append(t2 - t1)
        wait.append(t3 - t2)
        y = following[0]
    y.item()
    return dict(building_s=statistics.median(build), async_eval_s=statistics.median(queue),
                waiting_s=statistics.median(wait), steps=len(build))


class FixedCache:
    """A layer's keys and values as a compiled program holds them: buffers
    of one length for the whole generation (prompt and new tokens, as
    Bumblebee allocates its cache), written at a position given as an array
    (MLX's dynamic slice_update) and read whole, under an additive mask that
    hides the positions not written yet. mlx-lm's own cache instead grows
    and is read up to its offset, so a decoding step needs no mask."""

    def __init__(self, mx, length, dtype):
        self.mx, self.length, self.dtype = mx, length, dtype
        self.keys = self.values = None
        self.offset = 0

    def update_and_fetch(self, keys, values):
        mx = self.mx
        if self.keys is None:
            b, h, _, d = keys.shape
            self.keys = mx.zeros((b, h, self.length, d), keys.dtype)
            self.values = mx.zeros((b, h, self.length, values.shape[3]), values.dtype)
        start = mx.array([self.offset], dtype=mx.int32)
        self.keys = mx.slice_update(self.keys, keys, start, (2,))
        self.values = mx.slice_update(self.values, values, start, (2,))
        self.offset += keys.shape[2]
        return self.keys, self.values

    def make_mask(self, n, return_array=False, window_size=None):
        # (called before the update: query i is at position offset + i and
        # sees the keys up to it)
        mx = self.mx
        seen = mx.arange(self.length)[None, :] <= (self.offset + mx.arange(n))[:, None]
        return mx.where(seen, 0.0, -mx.inf).astype(self.dtype)


def fixed_cache_decode(mx, model, vocab, prompt, new, reps):
    """mlx-lm's model decoding greedily with FixedCache (ExMLX's static
    shapes: the whole cache and a mask each step), pipelined as mlx-lm's
    generate_step is (the next step queued before the last token is read):
    its decode rate and tokens."""
    dtype = model.model.norm.weight.dtype  # (never quantized)

    def generate(n):
        cache = [FixedCache(mx, prompt + n, dtype) for _ in model.layers]

        def step(ids):
            return mx.argmax(model(ids, cache=cache)[:, -1, :], axis=-1)

        tokens = []
        t = time.time()
        y = step(mx.array([prompt_ids(vocab, prompt)]))
        mx.async_eval(y)
        for k in range(n):
            following = step(y[:, None]) if k + 1 < n else None
            if following is not None:
                mx.async_eval(following)
            tokens.append(int(y.item()))
            y = following
        return time.time() - t, tokens

    rate, _ = decode_rate(generate, new, reps)
    return rate, generate(new)[1]


def greedy_torch(directory, device, prompt, new):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory).to(device).eval()
    ids = torch.tensor([prompt_ids(model.config.vocab_size, prompt)], device=device)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        prompt_logits = model(ids).logits[0, -1].float().cpu().numpy()
    steps = []
    for logits in out.logits:
        step = logits[0].float()
        top = torch.topk(step, 2).values.tolist()
        steps.append(dict(top=top[0], gap=top[0] - top[1], largest=step.abs().max().item()))
    emit(runtime="torch", version=torch.__version__,
         logits=save_logits(directory, "torch-greedy", prompt_logits),
         tokens=out.sequences[0, prompt:].tolist(), steps=steps)


def main(argv):
    if argv[:1] == ["make"]:
        make(argv[1], argv[2], argv[3])
    elif argv[:1] == ["run"]:
        directory, device, prompt, new = argv[1], argv[2], int(argv[3]), int(argv[4])
        reps = 1 if "--quick" in argv else 3
        bits = int(argv[argv.index("--bits") + 1]) if "--bits" in argv else None
        ptx_dir = argv[argv.index("--ptx-dir") + 1] if "--ptx-dir" in argv else None
        run_torch(directory, device, prompt, new, reps)
        run_mlx_lm(directory, device, prompt, new, reps, bits, ptx_dir)
    elif argv[:1] == ["greedy"]:
        greedy_torch(argv[1], argv[2], int(argv[3]), int(argv[4]))
    else:
        sys.exit(__doc__)
    emit(done=True)


if __name__ == "__main__":
    main(sys.argv[1:])
