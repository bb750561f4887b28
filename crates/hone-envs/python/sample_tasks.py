"""Samples a model's answers to tasks of a task file with transformers, and
scores each as hone scores replies (the last number), to see what a base
model's answers look like before it learns.

    python3 sample_tasks.py --gguf FILE.gguf --tasks tasks.jsonl --out result.json
        [--per-family 12] [--temperature 0.7] [--max-tokens 96] [--seed 0]

Writes the command, the date, the machine, each family's success and every
answer to `--out`.
"""

import argparse
import datetime
import json
import os
import platform
import random
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reasoning_gym_tasks import hone_score  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", required=True)
    p.add_argument("--tasks", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--per-family", type=int, default=12)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    folder, name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tasks = [json.loads(line) for line in open(args.tasks)]
    rng = random.Random(args.seed)
    families, answers = {}, []
    for family in sorted({t["family"] for t in tasks}):
        chosen = rng.sample([t for t in tasks if t["family"] == family], args.per_family)
        hits = 0
        for t in chosen:
            ids = tok.apply_chat_template(
                [{"role": "user", "content": t["prompt"]}], add_generation_prompt=True, return_tensors="pt"
            )
            ids = ids if torch.is_tensor(ids) else ids["input_ids"]
            out = model.generate(ids, max_new_tokens=args.max_tokens, do_sample=True, temperature=args.temperature)
            completion = out[0, ids.shape[1] :]
            reply = tok.decode(completion, skip_special_tokens=True)
            score = hone_score(t["answer"], reply)
            hits += score
            answers.append(
                {
                    "family": family,
                    "prompt": t["prompt"],
                    "answer": t["answer"],
                    "reply": reply,
                    "tokens": len(completion),
                    "solved": score == 1.0,
                }
            )
        families[family] = {"tasks": len(chosen), "solved": int(hits)}
        print(f"{family}: {int(hits)} of {len(chosen)}", file=sys.stderr)
    report = {
        "command": "python3 " + " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "families": families,
        "answers": answers,
    }
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
