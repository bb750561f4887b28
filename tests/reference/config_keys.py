"""Checkpoints as the installed transformers saves them, and copies with one
forward-changing config key altered, for the engine's test that every such
key is read or refused (crates/hone-engine/tests/layouts.rs).

    python3 config_keys.py --source DIR --arch llama|qwen2 --out DIR

`--source` is a checkpoint transformers can load (the test gives it one of
hone's tiny ones). The model and tokenizer are loaded and saved again with
`save_pretrained`, which writes today's layout: `dtype` and
`rope_parameters` in config.json, the chat template in chat_template.jinja.
generation_config.json then gets a list of EOS ids, as instruct checkpoints
ship it. Each variant is that directory with one config change; for each,
transformers' logits on a fixed input (or its refusal to load it) are
written beside it. Prints one JSON line: the variants, the input, the chat
transformers renders from the saved tokenizer.
"""

import argparse
import copy
import json
import os
import shutil

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

INPUT = [[1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45]]


def variants(config, arch):
    """name -> (the key altered, a function altering a config dict)."""
    layers = config["num_hidden_layers"]

    def rope(**kv):
        def change(c):
            params = dict(c.get("rope_parameters") or {"rope_type": "default", "rope_theta": c.get("rope_theta", 10000.0)})
            params.update(kv)
            c["rope_parameters"] = params

        return change

    def setting(key, value):
        def change(c):
            c[key] = value

        return change

    def legacy_theta(c):
        c.pop("rope_parameters", None)
        c["rope_theta"] = 500.0

    def sliding(c):
        c.update(use_sliding_window=True, sliding_window=2, max_window_layers=0, layer_types=["sliding_attention"] * layers)

    out = {
        "as saved": (None, lambda c: None),
        "rope_theta": ("rope_parameters.rope_theta", rope(rope_theta=500.0)),
        "rope_theta, the key before rope_parameters": ("rope_theta", legacy_theta),
        "linear rope scaling": ("rope_parameters.rope_type", rope(rope_type="linear", factor=4.0)),
        "llama3 rope scaling": (
            "rope_parameters.rope_type",
            rope(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8),
        ),
        "dynamic rope scaling": ("rope_parameters.rope_type", rope(rope_type="dynamic", factor=4.0)),
        "yarn rope scaling": ("rope_parameters.rope_type", rope(rope_type="yarn", factor=4.0, original_max_position_embeddings=8)),
        "rms_norm_eps": ("rms_norm_eps", setting("rms_norm_eps", 0.5)),
        "hidden_act": ("hidden_act", setting("hidden_act", "gelu_pytorch_tanh")),
        "partial_rotary_factor": ("partial_rotary_factor", setting("partial_rotary_factor", 0.5)),
        "tie_word_embeddings": ("tie_word_embeddings", setting("tie_word_embeddings", not config.get("tie_word_embeddings", False))),
        "quantization_config": ("quantization_config", setting("quantization_config", {"quant_method": "fp8", "weight_block_size": [8, 8]})),
    }
    if arch == "llama":
        out["attention_bias"] = ("attention_bias", setting("attention_bias", True))
        out["mlp_bias"] = ("mlp_bias", setting("mlp_bias", True))
    if arch == "qwen2":
        out["sliding window attention"] = ("use_sliding_window", sliding)
        out["layer_types"] = ("layer_types", setting("layer_types", ["sliding_attention"] + ["full_attention"] * (layers - 1)))
    return out


def logits(directory):
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.inference_mode():
        out = model(input_ids=torch.tensor(INPUT)).logits[0].float()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--arch", required=True, choices=["llama", "qwen2"])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    saved = os.path.join(args.out, "saved")
    AutoModelForCausalLM.from_pretrained(args.source, dtype=torch.float32).save_pretrained(saved)
    tokenizer = AutoTokenizer.from_pretrained(args.source)
    tokenizer.save_pretrained(saved)
    generation = os.path.join(saved, "generation_config.json")
    g = json.load(open(generation)) if os.path.exists(generation) else {}
    g["eos_token_id"] = [int(tokenizer.eos_token_id), 7]
    json.dump(g, open(generation, "w"), indent=2)
    config = json.load(open(os.path.join(saved, "config.json")))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    report = {
        "input_ids": INPUT,
        "saved": saved,
        "files": sorted(os.listdir(saved)),
        "config_keys": sorted(config),
        "chat": {"messages": messages, "text": tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)},
        "eos_token_ids": g["eos_token_id"],
        "variants": [],
    }
    base = logits(saved)
    for i, (name, (key, change)) in enumerate(variants(config, args.arch).items()):
        directory = os.path.join(args.out, f"variant-{i}")
        shutil.copytree(saved, directory)
        altered = copy.deepcopy(config)
        change(altered)
        json.dump(altered, open(os.path.join(directory, "config.json"), "w"), indent=2)
        entry = {"name": name, "key": key, "dir": directory}
        try:
            out = logits(directory)
            entry["logits"] = out.flatten().tolist()
            entry["shape"] = list(out.shape)
            entry["moved"] = (out - base).abs().max().item()
        except Exception as e:  # transformers cannot load it either
            entry["transformers_refuses"] = f"{type(e).__name__}: {e}"[:300]
        report["variants"].append(entry)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
