"""Checks what `hone serve` answers against Hugging Face transformers on the
same checkpoint: for each prompt, the gateway's greedy completion (its
`prompt_token_ids`, `token_ids` and `token_logprobs`) is fed to transformers
teacher-forced, on the device and dtype given, and the log-probability
transformers gives each of hone's tokens is compared with hone's. Several
`--url`s (e.g. the same checkpoint served on the CPU and on a GPU) are each
compared with the reference, and with each other on the tokens chosen.

Used to check the embedded engine on a GPU (`--features cuda`, see
docs/ARCHITECTURE.md, "On a GPU"); needs torch and transformers. Prints
one JSON object.
"""

import argparse
import json
import urllib.request

import torch
from transformers import AutoModelForCausalLM

PROMPTS = [
    "What is 17 + 25?",
    "Name three colours.",
    "Write one sentence about the sea.",
    "hi",
    "Count from one to five.",
    "What is the capital of France?",
    "Say something kind.",
    "Explain a list in Python.",
]


def ask(url, agent, prompt, max_tokens):
    body = {
        "model": agent,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "logprobs": True,
    }
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        answer = json.loads(response.read())
    choice = answer["choices"][0]
    return answer["prompt_token_ids"], choice["token_ids"], choice["token_logprobs"]


def reference(model, device, prompt_ids, token_ids):
    ids = torch.tensor([prompt_ids + token_ids], device=device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids) - 1
    return [logprobs[start + i, t].item() for i, t in enumerate(token_ids)], [
        int(logprobs[start + i].argmax()) for i in range(len(token_ids))
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--url", action="append", required=True)
    p.add_argument("--agent", default="assistant")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    p.add_argument("--max-tokens", type=int, default=24)
    args = p.parse_args()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(args.device).eval()
    report = {"reference": f"transformers on {args.device} in {args.dtype}", "servers": []}
    tokens_by_server = []
    for url in args.url:
        diffs, agree, total, chosen = [], 0, 0, []
        for prompt in PROMPTS:
            prompt_ids, token_ids, logprobs = ask(url, args.agent, prompt, args.max_tokens)
            theirs, argmax = reference(model, args.device, prompt_ids, token_ids)
            diffs += [abs(a - b) for a, b in zip(logprobs, theirs)]
            agree += sum(int(a == b) for a, b in zip(token_ids, argmax))
            total += len(token_ids)
            chosen.append(token_ids)
        tokens_by_server.append(chosen)
        report["servers"].append(
            {
                "url": url,
                "tokens": total,
                "max_abs_logprob_diff": max(diffs),
                "mean_abs_logprob_diff": sum(diffs) / len(diffs),
                "greedy_token_is_reference_argmax": agree / total,
            }
        )
    if len(tokens_by_server) > 1:
        first = tokens_by_server[0]
        report["same_tokens_as_first_server"] = [
            sum(a == b for a, b in zip(first, other)) / len(PROMPTS) for other in tokens_by_server[1:]
        ]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
