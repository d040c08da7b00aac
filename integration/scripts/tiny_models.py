"""Creates tiny random-initialized Hugging Face models locally (no hub) and
PyTorch's reference outputs for the Bumblebee tests.

    python3 scripts/tiny_models.py OUT_DIR

For each model, OUT_DIR/<name>/ gets the model (`save_pretrained`,
safetensors) and reference.safetensors: the inputs, PyTorch's logits in f32
and in bf16 (the model cast with `.to(torch.bfloat16)`, logits widened to
f32), and for the causal LMs the ids of a greedy generation of 20 tokens. The
text models get a word-level tokenizer: "<pad>", "<s>", "</s>", "<unk>" are
ids 0 to 3, "w4" … "w127" the others.

Notes on Bumblebee's loading (v0.7.0): BERT's masked-LM decoder is saved
untied (transformers 5 leaves a tied decoder weight out of the file, and
Bumblebee would initialize it randomly); GPT-2 stays tied (Bumblebee builds
its LM head from the token embedding); GPT-2's pad token id is set (saved as
null otherwise, which Bumblebee rejects). initializer_range 0.2 makes the
logits large enough for greedy choices to be decisive.
"""

import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForMaskedLM,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    ViTConfig,
    ViTForImageClassification,
)

from gpt2_config import gpt2_config

VOCAB = 128
IDS = torch.tensor([[1, 17, 42, 99, 5, 63, 7, 88], [1, 23, 9, 54, 120, 3, 77, 31]])
MASK = torch.ones_like(IDS)
NEW_TOKENS = 20

# The models' sizes, by Hugging Face's standard names (gpt2_config.py)
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
TEXT = dict(TINY, vocab_size=VOCAB, max_position_embeddings=64, initializer_range=0.2)
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def text_models():
    bert = BertConfig(**TEXT, tie_word_embeddings=False)
    gpt2 = gpt2_config(TEXT, **TOKENS)
    llama = LlamaConfig(
        **dict(TEXT, num_attention_heads=4),
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        **TOKENS,
    )
    return [
        ("bert", BertForMaskedLM(bert), False),
        ("gpt2", GPT2LMHeadModel(gpt2), True),
        ("llama", LlamaForCausalLM(llama), True),
    ]


def vit():
    config = ViTConfig(
        **TINY, image_size=32, patch_size=8, num_channels=3, num_labels=10, initializer_range=0.2
    )
    return ViTForImageClassification(config)


SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]


def word(i):
    """Token id i as text: the special tokens, then "w4" … "w127"."""
    return SPECIAL[i] if i < len(SPECIAL) else f"w{i}"


def word_tokenizer():
    """A word-level tokenizer for the tiny vocabulary (`word/1`), split at
    spaces. (Special tokens are matched anywhere in a text, so none may be
    the start of a word: "w1" would split "w17".)"""
    words = Tokenizer(models.WordLevel({word(i): i for i in range(VOCAB)}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=words, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def logits(model, **inputs):
    with torch.no_grad():
        return model(**inputs).logits.float().contiguous()


def main(out):
    torch.manual_seed(0)
    for name, model, causal in text_models():
        model.eval()
        model.save_pretrained(f"{out}/{name}", safe_serialization=True)
        word_tokenizer().save_pretrained(f"{out}/{name}")
        reference = {
            "input_ids": IDS.contiguous(),
            "attention_mask": MASK.contiguous(),
            "logits": logits(model, input_ids=IDS, attention_mask=MASK),
        }
        if causal:
            with torch.no_grad():
                generated = model.generate(
                    input_ids=IDS[:1],
                    attention_mask=MASK[:1],
                    max_new_tokens=NEW_TOKENS,
                    min_new_tokens=NEW_TOKENS,
                    do_sample=False,
                    pad_token_id=0,
                    eos_token_id=2,
                )
            reference["generated"] = generated[0, IDS.shape[1] :].contiguous()
        reference["logits_bf16"] = logits(
            model.to(torch.bfloat16), input_ids=IDS, attention_mask=MASK
        )
        save_file(reference, f"{out}/{name}/reference.safetensors")

    model = vit().eval()
    model.save_pretrained(f"{out}/vit", safe_serialization=True)
    pixels = torch.rand(2, 3, 32, 32)
    save_file(
        {
            # Bumblebee takes images channels last
            "pixel_values": pixels.permute(0, 2, 3, 1).contiguous(),
            "logits": logits(model, pixel_values=pixels),
            "logits_bf16": logits(
                model.to(torch.bfloat16), pixel_values=pixels.to(torch.bfloat16)
            ),
        },
        f"{out}/vit/reference.safetensors",
    )
    print("torch", torch.__version__)


if __name__ == "__main__":
    main(sys.argv[1])
