# SPDX-License-Identifier: Apache-2.0
"""Tiny random models for the engine test, made here: no hub, no download.

    python models.py DIR [--big]

writes DIR/llama, DIR/qwen2 and DIR/gemma (and DIR/llama-big with --big, a
model with hidden size 2048 for the speed runs): a transformers config,
random weights (safetensors) and a word-level tokenizer built with the
tokenizers library over a fixed vocabulary; and that tokenizer alone in
DIR/tokenizer, for the engine to load with every model (transformers loads
a tokenizer beside a Qwen2 config as Qwen2's BPE tokenizer, which encodes
these prompts as nothing). The shapes are chosen for vLLM's
CPU attention (head size 64) and to exercise every replaced layer: Llama and
Qwen2 run RMSNorm, SiluAndMul and RotaryEmbedding; Gemma runs GemmaRMSNorm,
GeluAndMul (tanh) and RotaryEmbedding. Weights are drawn with a fixed seed
and a larger spread than a real initialisation, so that greedy decoding has
clear winners and float32 runs agree token for token.
"""

import argparse
import json
import os

import torch

WORDS = [f"w{i}" for i in range(500)]
VOCAB = ["<pad>", "<s>", "</s>", "<unk>"] + WORDS

PROMPTS = [
    "w1 w2 w3 w4 w5 w6 w7 w8",
    "w100 w42 w7 w300 w250",
    "w9 w9 w9 w9 w9 w9 w9 w9 w9 w9 w9 w9",
    "w321 w123 w231 w312 w132 w213 w400 w401 w402 w403 w404 w405 w406",
]

COMMON = dict(vocab_size=len(VOCAB), hidden_size=256, intermediate_size=512,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=64, max_position_embeddings=512, rms_norm_eps=1e-6,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
              torch_dtype="float32")

BIG = dict(COMMON, hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
           num_attention_heads=32, num_key_value_heads=8)


def tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    fast.save_pretrained(path)


def save(path, config, seed):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config.initializer_range = 0.15
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # norms start at 1 (0 for Gemma's 1 + w): perturb them
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer(path)
    # vLLM reads generation_config.json; greedy decoding is asked per request.
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, f)


def make(out, big=False):
    from transformers import GemmaConfig, LlamaConfig, Qwen2Config

    made = {"tokenizer": os.path.join(out, "tokenizer")}
    if not os.path.exists(os.path.join(made["tokenizer"], "tokenizer.json")):
        tokenizer(made["tokenizer"])
    specs = [("llama", LlamaConfig(**COMMON)),
             ("qwen2", Qwen2Config(**COMMON)),
             ("gemma", GemmaConfig(**dict(COMMON, hidden_activation="gelu_pytorch_tanh",
                                          hidden_act="gelu_pytorch_tanh")))]
    if big:
        specs.append(("llama-big", LlamaConfig(**BIG)))
    for seed, (name, config) in enumerate(specs):
        path = os.path.join(out, name)
        if not os.path.exists(os.path.join(path, "config.json")):
            save(path, config, seed)
        made[name] = path
    return made


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--big", action="store_true")
    args = ap.parse_args()
    for name, path in make(args.dir, args.big).items():
        print(name, path)
