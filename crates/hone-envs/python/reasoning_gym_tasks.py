"""Exports tasks from reasoning-gym's generators as the task file hone's
`tasks` environment reads (`hone demo --tasks FILE`): JSON Lines of
`{"prompt", "answer", "family", "source"}`, one distinct prompt per line.

    python3 reasoning_gym_tasks.py --out tasks.jsonl [--per-family 2000] [--seed 1]
        [--families basic_arithmetic,chain_sum,leg_counting]

Families are reasoning-gym dataset names, each at the difficulty set
below (sized so that a small instruct model solves some and not all).
Every answer is a number, and each task is checked on the way out: its own
answer scores 1 under reasoning-gym's `score_answer`, and so does the last
number of a reply ending with it (the rule hone scores replies by).

`--check FILE [--cases]` instead re-reads a task file and, for each task,
compares the rule with reasoning-gym's verdict on replies of several shapes
(prints one JSON line; with `--cases` every reply and verdict, which the
tests compare with hone's own scorer).
"""

import argparse
import importlib.metadata
import json
import re
import sys

import reasoning_gym

# reasoning-gym's dataset name -> its configuration here.
FAMILIES = {
    # "Calculate 45 - -17." : two terms of one or two digits, + and -.
    "basic_arithmetic": dict(
        min_terms=2, max_terms=2, min_digits=1, max_digits=2, operators=("+", "-"), allow_parentheses=False
    ),
    # "State the final answer to the following arithmetic problem: 4 + 31 + 7 =" : three terms.
    "chain_sum": dict(min_terms=3, max_terms=3, min_digits=1, max_digits=2),
    # "... how many legs are there in total if you have 2 cats, 1 spider?" : two or three kinds of animal.
    "leg_counting": dict(min_animals=2, max_animals=3, min_instances=1, max_instances=4),
}

NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def last_number(text):
    """The last number of `text`, as hone reads it (`-` only when it is a sign)."""
    last = None
    for m in NUMBER.finditer(text):
        start = m.start()
        token = m.group(0)
        if token.startswith("-") and start > 0 and text[start - 1].isalnum():
            token = token[1:]
        last = token.replace(",", "")
    return last


def hone_score(answer, reply):
    said = last_number(reply)
    try:
        return 1.0 if said is not None and abs(float(said) - float(answer)) <= 1e-6 else 0.0
    except ValueError:
        return 0.0


def export(args):
    version = importlib.metadata.version("reasoning-gym")
    seen = set()
    written = 0
    with open(args.out, "w") as out:
        for family in args.families:
            config = FAMILIES[family]
            dataset = reasoning_gym.create_dataset(family, size=args.per_family * 3, seed=args.seed, **config)
            kept = 0
            for entry in dataset:
                prompt, answer = entry["question"].strip(), str(entry["answer"]).strip()
                if prompt in seen:
                    continue
                float(answer)  # every answer is a number
                assert dataset.score_answer(answer, entry) == 1.0, entry
                assert hone_score(answer, f"The answer is {answer}.") == 1.0, entry
                seen.add(prompt)
                line = {
                    "prompt": prompt,
                    "answer": answer,
                    "family": family,
                    "source": f"reasoning-gym {version} {family} seed {args.seed}",
                }
                out.write(json.dumps(line) + "\n")
                kept += 1
                written += 1
                if kept == args.per_family:
                    break
            print(f"{family}: {kept} tasks", file=sys.stderr)
    print(json.dumps({"written": written, "out": args.out}))


def check(path, with_cases):
    """hone's rule against reasoning-gym's own verdict on the extracted number
    (`with_cases`: every reply with reasoning-gym's verdict, for hone's own
    scorer to be compared with)."""
    datasets = {}
    disagree, cases = [], []
    compared = 0
    for line in open(path):
        task = json.loads(line)
        family = task["family"]
        if family not in datasets:
            datasets[family] = reasoning_gym.create_dataset(family, size=1, seed=0, **FAMILIES[family])
        entry = {"question": task["prompt"], "answer": task["answer"], "metadata": {}}
        answer = task["answer"]
        wrong = str(int(float(answer)) + 1)
        replies = [
            answer,
            f"The answer is {answer}.",
            f"{task['prompt']} {answer}",
            f"I think it is {wrong}.",
            f"The answer is {answer}, no wait, {wrong}.",
            "I don't know.",
        ]
        for reply in replies:
            said = last_number(reply)
            theirs = datasets[family].score_answer(said, entry) if said is not None else 0.0
            ours = hone_score(answer, reply)
            compared += 1
            cases.append({"prompt": task["prompt"], "reply": reply, "reasoning_gym": theirs})
            if (theirs == 1.0) != (ours == 1.0):
                disagree.append({"prompt": task["prompt"], "reply": reply, "reasoning_gym": theirs, "hone": ours})
    report = {"compared": compared, "disagree": disagree[:20], "disagreements": len(disagree)}
    if with_cases:
        report["cases"] = cases
    print(json.dumps(report))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="the task file to write")
    p.add_argument("--per-family", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--families", type=lambda s: s.split(","), default=list(FAMILIES))
    p.add_argument("--check", help="a task file to check hone's scoring rule on")
    p.add_argument("--cases", action="store_true", help="with --check: print every reply and reasoning-gym's verdict")
    args = p.parse_args()
    if args.check:
        check(args.check, args.cases)
        return
    if not args.out:
        p.error("--out is required (or --check FILE)")
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        p.error(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    export(args)


if __name__ == "__main__":
    main()
