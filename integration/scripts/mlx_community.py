"""Tiny quantized model folders in mlx-community's layout, and mlx-lm's
outputs on them, for test/mlx_community_test.exs.

    python3 scripts/mlx_community.py OUT_DIR

For each architecture below, a random-initialized model made with
transformers (no hub, tiny_models.py's sizes and word-level tokenizer) is
saved to OUT_DIR/hf-<name>/ and converted by mlx-lm's `convert` with
quantization (4 bits, groups of 32) to OUT_DIR/<name>/ (the Llama also at 3
bits, to OUT_DIR/llama-3bit/): config.json with a
"quantization" entry, model.safetensors with each linear and embedding layer
as packed uint32 `weight`, `scales` and `biases`. OUT_DIR/<name>/ also gets
mlx_lm_reference.safetensors, from mlx-lm on that converted folder: the
prompt's ids, its logits at every position (float32), and the ids of its
greedy generation of 20 tokens.

Needs Python mlx and mlx-lm (ExMLX.Build.bench_python/0 and bench_mlx_lm/0)
on PYTHONPATH.
"""

import json
import os
import sys

import numpy as np
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from tiny_models import IDS, NEW_TOKENS, TEXT, TOKENS, word_tokenizer

ROPE_THETA = 10000.0
BITS = 4
GROUP_SIZE = 32


def models():
    shared = dict(
        TEXT,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-6,
        **TOKENS,
    )
    return [
        # an output layer of its own
        ("llama", LlamaForCausalLM(LlamaConfig(**shared, tie_word_embeddings=False))),
        # the output layer is the token embedding (tied)
        ("qwen3", Qwen3ForCausalLM(Qwen3Config(**shared, tie_word_embeddings=True))),
        ("mistral", MistralForCausalLM(MistralConfig(**shared, tie_word_embeddings=False))),
        # fused query/key/value and gate/up layers, which Bumblebee splits
        ("phi3", Phi3ForCausalLM(Phi3Config(**shared, tie_word_embeddings=False))),
    ]


def save_hf(model, directory):
    """The model as a Hub checkpoint has it: float32 safetensors, and
    rope_theta at the config's top level (transformers 5 keeps it only in
    "rope_parameters", which Bumblebee 0.7 does not read)."""
    model.eval()
    model.save_pretrained(directory, safe_serialization=True)
    word_tokenizer().save_pretrained(directory)
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["rope_theta"] = ROPE_THETA
    config.pop("rope_parameters", None)
    config.pop("rope_scaling", None)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def mlx_lm_reference(directory):
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import load_model
    from pathlib import Path
    from safetensors.numpy import save_file

    mx.set_default_device(mx.cpu)
    model, _ = load_model(Path(directory))
    prompt = IDS[0].tolist()
    logits = model(mx.array([prompt]))[0].astype(mx.float32)
    generated = [int(token) for token, _ in generate_step(mx.array(prompt), model, max_tokens=NEW_TOKENS)]
    save_file(
        {
            "input_ids": np.array([prompt], dtype=np.int64),
            "logits": np.array(logits),
            "generated": np.array(generated, dtype=np.int64),
        },
        os.path.join(directory, "mlx_lm_reference.safetensors"),
    )


def main(out):
    from mlx_lm.convert import convert

    torch.manual_seed(0)
    for name, model in models():
        source = os.path.join(out, f"hf-{name}")
        target = os.path.join(out, name)
        save_hf(model, source)
        convert(hf_path=source, mlx_path=target, quantize=True, q_group_size=GROUP_SIZE, q_bits=BITS)
        mlx_lm_reference(target)
    # the Llama at 3 bits too: values packed across 32-bit words
    target = os.path.join(out, "llama-3bit")
    convert(hf_path=os.path.join(out, "hf-llama"), mlx_path=target, quantize=True,
            q_group_size=GROUP_SIZE, q_bits=3)
    mlx_lm_reference(target)
    print("mlx-lm", __import__("mlx_lm").__version__)


if __name__ == "__main__":
    main(sys.argv[1])
