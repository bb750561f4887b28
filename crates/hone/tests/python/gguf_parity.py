"""Checks `hone model import` against transformers' own GGUF loader, on the
same GGUF file:

- tensors: every tensor hone wrote against the one transformers
  dequantises (names, shapes, largest absolute difference);
- tokenizer: hone's tokenizer.json (through the `tokenizers` library, the one
  the engine uses) against transformers' GGUF tokenizer, on a corpus of
  prose, code, numbers, non-Latin scripts, emoji and odd whitespace: with
  the pre-tokenizer the file names (transformers' loader drops it, see
  `with_named_pre_tokenizer`), and as transformers builds it;
- serving: for each prompt, `hone serve`'s greedy answer (its
  `prompt_token_ids`, `token_ids`, `token_logprobs`) against transformers'
  chat template, greedy generation and teacher-forced log-probabilities.

GGUF names the file, CHECKPOINT hone's import of it, HONE_URL the gateway
serving that checkpoint as agent `assistant`. Prints one JSON line.
"""

import json
import os
import urllib.request

import torch
from safetensors.torch import load_file
from gguf import GGUFReader
from tokenizers import Tokenizer, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 1234 + 5678? It is 6912; and 3.14159 × 2 = 6.28318.",
    "def add(a, b):\n    return a + b  # sum\n\n\tif x != y: print(f'{x!r}')",
    "fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "Здравствуйте, мир! Как дела?",
    "你好，世界。今天天气很好。",
    "こんにちは、世界！カタカナとひらがな。",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "Emoji: 👋🏽 🎉🎉 👨‍👩‍👧 ❤️ 🇫🇷",
    "   leading spaces, trailing tabs\t\t\n\n\nand blank lines   ",
    "MiXeD CaSe, ALLCAPS, snake_case, camelCase, kebab-case, 0x1F, 1e-9, 007",
    "<|im_start|>user\nspecial tokens in text<|im_end|>",
    "naïve café résumé — “quotes” ‘single’ … ½ °C",
    "x² + y³ = z⁴, chapter Ⅻ, 3½ cups, ٣ and ४",
    "",
]

PROMPTS = [
    "What is 17 + 25?",
    "Name three colours.",
    "Write one sentence about the sea.",
    "hi",
    "Translate 'good morning' into French.",
    "What is the capital of Japan?",
]

MAX_TOKENS = 24


def tensors(model, checkpoint):
    theirs = {k: v.float() for k, v in model.state_dict().items()}
    ours = {}
    for name in sorted(os.listdir(checkpoint)):
        if name.endswith(".safetensors"):
            ours.update(load_file(os.path.join(checkpoint, name)))
    tied = model.config.tie_word_embeddings and "lm_head.weight" not in ours
    if tied:
        theirs.pop("lm_head.weight", None)
    missing = sorted(set(theirs) - set(ours))
    extra = sorted(set(ours) - set(theirs))
    shapes = sorted(k for k in set(ours) & set(theirs) if tuple(ours[k].shape) != tuple(theirs[k].shape))
    diff = max(
        ((ours[k].float() - theirs[k]).abs().max().item() for k in set(ours) & set(theirs) if k not in shapes),
        default=float("inf"),
    )
    return {
        "count": len(ours),
        "missing": missing,
        "extra": extra,
        "shape_mismatch": shapes,
        "max_abs_diff": diff,
        "tied_lm_head": tied,
    }


def pre_tokenizer_named(gguf):
    """The pre-tokenizer the GGUF file names (`tokenizer.ggml.pre`)."""
    reader = GGUFReader(gguf)
    field = reader.fields.get("tokenizer.ggml.pre")
    return bytes(field.parts[field.data[0]]).decode() if field else None


def with_named_pre_tokenizer(reference, named):
    """transformers' GGUF tokenizer, with the pre-tokenizer the file names.

    transformers' GGUF loader gives every byte-level file GPT-2's
    pre-tokenizer; `smollm` (the one SmolLM2's own tokenizer.json and
    llama.cpp use) first splits every numeric character on its own. The two
    differ only where a numeric character other than an ASCII digit (½, ²,
    Ⅻ) meets a neighbour a merge would join it to.
    """
    backend = Tokenizer.from_str(reference.backend_tokenizer.to_str())
    if named == "smollm":
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
    return backend


def tokens(reference, checkpoint, gguf):
    ours = Tokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
    named = pre_tokenizer_named(gguf)
    fixed = with_named_pre_tokenizer(reference, named)
    differ, differ_plain = [], []
    total = 0
    for text in CORPUS:
        a = ours.encode(text, add_special_tokens=False).ids
        b = fixed.encode(text, add_special_tokens=False).ids
        plain = reference(text, add_special_tokens=False)["input_ids"]
        total += len(b)
        if a != b:
            differ.append({"text": text, "hone": a, "transformers": b})
        elif ours.decode(a, skip_special_tokens=False) != reference.decode(b, skip_special_tokens=False):
            differ.append({"text": text, "decoded": ours.decode(a, skip_special_tokens=False)})
        if a != plain:
            differ_plain.append(
                {"text": text, "non_ascii_numeric": any(c.isnumeric() and not c.isascii() for c in text)}
            )
    return {
        "texts": len(CORPUS),
        "tokens": total,
        "pre_tokenizer": named,
        "differ": differ,
        "differ_from_gpt2_pre_tokenizer": differ_plain,
    }


def ask(url, prompt):
    body = {
        "model": "assistant",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        "logprobs": True,
    }
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.loads(response.read())
    choice = answer["choices"][0]
    return answer["prompt_token_ids"], choice["token_ids"], choice["token_logprobs"], choice["message"]["content"]


def strip(ids, eos):
    """`ids` without the end-of-sequence tokens that close it."""
    ids = list(ids)
    while ids and ids[-1] in eos:
        ids.pop()
    return ids


def serving(model, tokenizer, url):
    report = {"prompts": len(PROMPTS), "tokens": 0, "prompt_ids_differ": [], "greedy_differ": [], "max_abs_logprob_diff": 0.0}
    for prompt in PROMPTS:
        prompt_ids, token_ids, logprobs, text = ask(url, prompt)
        expected = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(expected, dict) or hasattr(expected, "input_ids"):
            expected = expected["input_ids"]
        if list(expected) != prompt_ids:
            report["prompt_ids_differ"].append({"prompt": prompt, "hone": prompt_ids, "transformers": list(expected)})
        ids = torch.tensor([prompt_ids])
        with torch.inference_mode():
            generated = model.generate(ids, do_sample=False, max_new_tokens=MAX_TOKENS, attention_mask=torch.ones_like(ids))
            greedy = generated[0, len(prompt_ids):].tolist()
            forced = model(input_ids=torch.tensor([prompt_ids + token_ids])).logits[0].float()
        eos = model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [eos])
        if strip(greedy, eos) != strip(token_ids, eos):
            report["greedy_differ"].append({"prompt": prompt, "hone": token_ids, "transformers": greedy, "hone_text": text})
        steps = torch.log_softmax(forced, dim=-1)
        start = len(prompt_ids) - 1
        for i, t in enumerate(token_ids):
            report["max_abs_logprob_diff"] = max(report["max_abs_logprob_diff"], abs(steps[start + i, t].item() - logprobs[i]))
        report["tokens"] += len(token_ids)
    return report


def main():
    gguf = os.environ["GGUF"]
    checkpoint = os.environ["CHECKPOINT"]
    folder, name = os.path.split(gguf)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    report = {
        "tensors": tensors(model, checkpoint),
        "tokens": tokens(tokenizer, checkpoint, gguf),
        "serving": serving(model, tokenizer, os.environ["HONE_URL"]),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
