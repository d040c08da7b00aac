"""GPT-2's configuration from sizes under Hugging Face's standard names
(`hidden_size`, `num_hidden_layers`, ...), the ones BERT's, Llama's and
ViT's configurations take: GPT-2's has names of its own (`n_embd`,
`n_layer`, ...)."""

from transformers import GPT2Config

# GPT-2's names for the standard ones
GPT2_NAMES = dict(
    hidden_size="n_embd",
    num_hidden_layers="n_layer",
    num_attention_heads="n_head",
    intermediate_size="n_inner",
    max_position_embeddings="n_positions",
)


def gpt2_config(sizes, **extra):
    """GPT2Config of `sizes` (standard names) and `extra` (GPT-2's names)."""
    return GPT2Config(**{GPT2_NAMES.get(k, k): v for k, v in sizes.items()}, **extra)
