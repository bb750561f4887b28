"""Hugging Face transformers' side of `hone bench engine`.

Measures the same things as crates/hone-engine/src/bench.rs, the same way:
prefill tokens/s (one forward over the prompt, last position's logits only)
and decode tokens/s (greedy steps with the KV cache) at batch 1 and 8, on
the same checkpoint, device and dtype (f32 on the CPU unless told), the
median of `reps` timed runs after one warm-up; on a GPU every timed span
ends with the device synchronised, as hone's ends by reading the tokens
back. Prints one JSON object.

Needs torch and transformers (`pip install torch transformers safetensors`);
`hone bench engine --python PATH` runs it with that interpreter.
"""

import argparse
import json
import os
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def prompt_ids(length, vocab):
    span = min(vocab, 256)
    return [(31 * i + 7) % span for i in range(length)]


def timed(reps, run):
    run()
    return statistics.median(run() for _ in range(max(reps, 1)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(args.device)
    model.eval()
    prompt = prompt_ids(args.prompt, model.config.vocab_size)

    def tokens(logits):
        # Reading the tokens back waits for the device, as hone's `to_vec1` does.
        return logits[:, -1].argmax(-1, keepdim=True).tolist()

    def prefill(batch):
        ids = torch.tensor([prompt] * batch, device=args.device)

        def run():
            start = time.perf_counter()
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            tokens(out.logits)
            return batch * len(prompt) / (time.perf_counter() - start)

        return timed(args.reps, run)

    def decode(batch):
        # Each row prefilled on its own, as the engine does for separate requests.
        def run():
            ids = torch.tensor([prompt] * batch, device=args.device)
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            nxt = torch.tensor(tokens(out.logits), device=args.device)
            start = time.perf_counter()
            for _ in range(args.new):
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = torch.tensor(tokens(out.logits), device=args.device)
            return batch * args.new / (time.perf_counter() - start)

        return timed(args.reps, run)

    with torch.inference_mode():
        figures = {
            "prefill_b1": prefill(1),
            "prefill_b8": prefill(8),
            "decode_b1": decode(1),
            "decode_b8": decode(8),
        }
    figures["torch"] = torch.__version__
    figures["threads"] = torch.get_num_threads()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
