"""TRL's side of `hone bench learn`: GRPO with TRL's GRPOTrainer (its loss,
AdamW, a PEFT LoRA adapter) on the demo's base checkpoint and the `calc`
environment, for a wall-clock budget.

Episodes are multi-step (tool call, tool result, answer), so they are
sampled by a `rollout_func` (TRL's hook for environments): the model's own
tokens from `generate` on the policy being trained, the tool results that
hone's environment endpoint returns (`POST /step`) spliced in as the chat
template renders them and masked out of the loss (`env_mask`). The reward
is, with --reward-url (hone's default), the one hone's learner gives its own
rollouts: the whole episode is sent to `POST /reward`, where hone replays
it, a simulated user reacts to it with implicit signals and the agent's
reward spec scores it (signals and penalties); without it, the
environment's hidden score of the final answer. Prompts are the token ids
hone's engine renders for each task, so both learners start from the same
prompt the base was trained on.

Every --checkpoint-seconds of learning (saving excluded) the adapter is
saved with the learning time and episodes so far; hone measures each on
the held-out tasks through its own gateway, the same instrument as its own
side. Run by `hone bench learn --python PY`; needs torch, transformers,
peft, trl and datasets. Progress goes to stderr.
"""

import argparse
import json
import os
import sys
import time
import urllib.request
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402


def post(url, body):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def tool_turn(tokenizer, results):
    """The text between a model turn that called tools and the next one,
    as the chat template renders it: the turn's end, one tool message per
    result, the assistant's opener."""
    head = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    before = tokenizer.apply_chat_template(head, tokenize=False)
    after = tokenizer.apply_chat_template(
        head + [{"role": "tool", "content": r} for r in results], tokenize=False, add_generation_prompt=True
    )
    if not (after.startswith(before) and before.endswith("<|im_end|>\n")):
        sys.exit("learn_trl.py: the checkpoint's chat template does not end a turn with `<|im_end|>\\n`")
    # The model's turn ends at <|im_end|> (its stop token); the template's newline follows.
    return "\n" + after[len(before):]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--tasks", required=True, help="JSON written by hone: tasks and settings")
    p.add_argument("--endpoint", required=True, help="the environment endpoint's base URL")
    p.add_argument("--minutes", type=float, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoint-seconds", type=float, default=60.0)
    p.add_argument("--reward-url", help="hone's `POST /reward`; without it the reward is the hidden score")
    args = p.parse_args()
    spec = json.load(open(args.tasks))
    torch.manual_seed(args.seed)

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    stops = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    im_end = stops[0]
    tasks = {t["input"]: t["prompt_ids"] for t in spec["tasks"]}
    temperature, max_tokens, max_steps = spec["temperature"], spec["max_tokens"], spec["max_steps"]
    step_url = args.endpoint.rstrip("/") + "/step"

    def sample(policy, context, n):
        """`n` turns sampled from one context in one batch: tokens up to and
        including the first stop token, and their logprobs at the temperature."""
        out = policy.generate(
            input_ids=torch.tensor([context]),
            attention_mask=torch.ones(1, len(context), dtype=torch.long),
            do_sample=True,
            temperature=temperature,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_tokens,
            num_return_sequences=n,
            eos_token_id=stops,
            pad_token_id=stops[1],
            output_scores=True,
            return_dict_in_generate=True,
        )
        turns = []
        for i in range(n):
            tokens = out.sequences[i, len(context):].tolist()
            end = next((k + 1 for k, t in enumerate(tokens) if t in stops), len(tokens))
            tokens = tokens[:end]
            logprobs = [
                torch.log_softmax(out.scores[k][i].float(), dim=-1)[t].item() for k, t in enumerate(tokens)
            ]
            turns.append((tokens, logprobs))
        return turns

    def rollout(prompts, trainer):
        policy = trainer.model
        training = policy.training
        policy.eval()
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "score": [], "episode_reward": []}
        # TRL repeats each prompt `group` times in a row: a group's first
        # turns share the prompt, so they are sampled in one batch.
        first = []
        with torch.no_grad():
            for i, prompt in enumerate(prompts):
                if i == 0 or prompt != prompts[i - 1]:
                    k = 1
                    while i + k < len(prompts) and prompts[i + k] == prompt:
                        k += 1
                    first = sample(policy, tasks[prompt], k)
                opening = tasks[prompt]
                ids, logprobs, mask, score, turns = [], [], [], 0.0, []
                for turn in range(max_steps):
                    tokens, lps = first.pop(0) if turn == 0 else sample(policy, opening + ids, 1)[0]
                    ids, logprobs, mask = ids + tokens, logprobs + lps, mask + [1] * len(tokens)
                    ended = bool(tokens) and tokens[-1] in stops
                    text = tokenizer.decode(tokens[:-1] if ended else tokens)
                    turns.append({"text": text, "ended": ended})
                    reply = post(step_url, {"input": prompt, "turn": text, "last": turn + 1 == max_steps})
                    if "score" in reply:
                        score = reply["score"]
                        break
                    between = ("" if ended else "<|im_end|>") + tool_turn(tokenizer, reply["tool_results"])
                    spliced = tokenizer(between, add_special_tokens=False).input_ids
                    ids, logprobs, mask = ids + spliced, logprobs + [0.0] * len(spliced), mask + [0] * len(spliced)
                if not ids or ids[-1] != im_end:
                    ids, logprobs, mask = ids + [im_end], logprobs + [0.0], mask + [0]
                out["prompt_ids"].append(opening)
                out["completion_ids"].append(ids)
                out["logprobs"].append(logprobs)
                out["env_mask"].append(mask)
                out["score"].append(score)
                if args.reward_url:
                    out["episode_reward"].append(post(args.reward_url, {"input": prompt, "turns": turns})["reward"])
                else:
                    out["episode_reward"].append(score)
        if training:
            policy.train()
        return out

    def reward(prompts, completions, episode_reward, **_):
        return [float(r) for r in episode_reward]

    group, per_step = spec["group_size"], spec["tasks_per_step"]
    config = GRPOConfig(
        output_dir=os.path.join(args.out, "trainer"),
        use_cpu=True,
        per_device_train_batch_size=group * per_step,
        num_generations=group,
        max_completion_length=max_tokens * max_steps + 256,
        temperature=temperature,
        beta=0.0,
        epsilon=spec["epsilon_low"],
        epsilon_high=spec["epsilon_high"],
        loss_type="bnpo",
        learning_rate=spec["lr"],
        max_steps=1_000_000,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=False,
        seed=args.seed,
        disable_tqdm=True,
    )
    lora = LoraConfig(
        r=spec["rank"],
        lora_alpha=spec["alpha"],
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    budget = args.minutes * 60.0

    class Clock(TrainerCallback):
        """Learning time (saving excluded), episodes, checkpoints, the budget."""

        def __init__(self):
            self.started = None
            self.paused = 0.0
            self.saved_at = 0.0
            self.episodes = 0
            self.saved = 0
            self.rewards = []
            self.trainer = None

        def learning(self):
            return time.monotonic() - self.started - self.paused

        def on_train_begin(self, args_, state, control, **_):
            self.started = time.monotonic()

        def on_log(self, args_, state, control, logs=None, **_):
            if logs and "reward" in logs:
                self.rewards.append(float(logs["reward"]))
                recent = self.rewards[-5:]
                print(
                    f"trl: step {state.global_step}, {self.learning():.0f} s, {self.episodes} episodes, "
                    f"reward {self.rewards[-1]:.3f} (mean of the last {len(recent)} steps {sum(recent) / len(recent):.3f})",
                    file=sys.stderr,
                    flush=True,
                )

        def on_step_end(self, args_, state, control, **_):
            self.episodes += group * per_step
            now = self.learning()
            done = now >= budget
            if done or now - self.saved_at >= args.checkpoint_seconds:
                self.save(state.global_step, now)
            if done:
                control.should_training_stop = True

        def save(self, step, now):
            begun = time.monotonic()
            self.saved += 1
            path = os.path.join(args.out, "checkpoints", f"ckpt-{self.saved:03}")
            self.trainer.model.save_pretrained(path)
            meta = {"learning_s": now, "episodes": self.episodes, "step": step}
            json.dump(meta, open(os.path.join(path, "meta.json"), "w"))
            self.saved_at = now
            self.paused += time.monotonic() - begun

    clock = Clock()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": list(tasks)}),
        processing_class=tokenizer,
        peft_config=lora,
        rollout_func=rollout,
        callbacks=[clock],
    )
    clock.trainer = trainer
    trainer.remove_callback(PrinterCallback)  # the Clock prints one line a step
    trainer.train()


if __name__ == "__main__":
    main()
