"""PyTorch's side of the Bumblebee model benchmark (bench/models.exs).

    python3 scripts/bench_models.py OUT_DIR [--quick] [--device cuda]

Creates two random-initialized models of a small but not tiny size in
OUT_DIR (once): GPT-2 (causal LM) and BERT (masked LM), hidden size 256,
4 layers, 4 heads, vocabulary 2,048. Times, on the CPU with torch's default
threads (or on the GPU with `--device cuda`, each call ending with
`torch.cuda.synchronize()`), in eval mode without gradients:

* the forward pass of a batch of 1 × 128 tokens (both models);
* greedy generation of 32 tokens after a 16-token prompt (GPT-2, with its
  key/value cache, as transformers does by default).

Prints one JSON object: medians in seconds and the torch version.
"""

import json
import os
import sys

import torch
from transformers import BertConfig, BertForMaskedLM, GPT2LMHeadModel

from gpt2_config import gpt2_config

# the repository's bench/timing.py: the timing of every Python reference
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from timing import timed  # noqa: E402

# Hugging Face's standard names (gpt2_config.py)
SIZE = dict(
    vocab_size=2048,
    max_position_embeddings=256,
    hidden_size=256,
    intermediate_size=1024,
    num_hidden_layers=4,
    num_attention_heads=4,
)


def models(out):
    gpt2 = gpt2_config(SIZE, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    bert = BertConfig(**SIZE, tie_word_embeddings=False)
    torch.manual_seed(0)
    made = {}
    for name, model in [("gpt2", GPT2LMHeadModel(gpt2)), ("bert", BertForMaskedLM(bert))]:
        path = f"{out}/{name}"
        if not os.path.exists(f"{path}/model.safetensors"):
            model.save_pretrained(path, safe_serialization=True)
        made[name] = type(model).from_pretrained(path).eval()
    return made


def median_time(fun, reps, device):
    def call():
        fun()
        if device == "cuda":
            torch.cuda.synchronize()

    return timed(call, reps, warmup=1)["median"]


def main(out, quick, device):
    reps = 3 if quick else 15
    made = {name: model.to(device) for name, model in models(out).items()}
    ids = (torch.arange(128) * 7 % SIZE["vocab_size"]).unsqueeze(0).to(device)
    prompt = ids[:, :16]
    result = {"torch": torch.__version__, "threads": torch.get_num_threads(), "device": device}
    if device == "cuda":
        result["gpu"] = torch.cuda.get_device_name()
    with torch.no_grad():
        for name, model in made.items():
            result[f"{name}_forward_s"] = median_time(
                lambda: model(input_ids=ids, attention_mask=torch.ones_like(ids)), reps, device
            )
        gpt2 = made["gpt2"]
        result["gpt2_generate_s"] = median_time(
            lambda: gpt2.generate(
                input_ids=prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=32,
                min_new_tokens=32,
                do_sample=False,
                pad_token_id=0,
            ),
            max(1, reps // 3),
            device,
        )
    print(json.dumps(result))


if __name__ == "__main__":
    flags = sys.argv[2:]
    device = flags[flags.index("--device") + 1] if "--device" in flags else "cpu"
    main(sys.argv[1], "--quick" in flags, device)
