"""hone's TRL trainer: trains the LoRA adapter of one `sft`, `dpo` or
`grpo` optimiser with TRL (SFTTrainer, DPOTrainer, GRPOTrainer) and PEFT,
on data hone prepared, under `accelerate launch` so that one config runs on a CPU, a
GPU, many GPUs (FSDP or DeepSpeed, by the user's accelerate config) or
many nodes.

hone owns the rules; this script only carries them to TRL:
- the data are token ids hone rendered with the checkpoint's chat template
  (recorded ids where it has them), written as TRL's own pre-tokenised
  columns (`input_ids`/`labels` for SFT, `prompt_ids`/`chosen_ids`/
  `rejected_ids` for DPO), so TRL tokenises nothing;
- GRPO trains on hone's groups, never generating: each row is one
  micro-batch of hone's plan (which completions, in which step, with which
  advantage, all computed by hone), with the sampler's logprobs; TRL's own
  GRPO loss then runs on them with hone's clip range, aggregation and KL
  weight. An on-policy completion's importance ratio is taken against the
  logprobs its sampler recorded; an off-policy one (served by an older
  version) against the starting policy, scored here before the first step,
  and its tokens weighted by TRL's truncated importance-sampling correction
  (`token_truncate`, capped at hone's `is_cap`);
- the hyperparameters are hone's training config for the optimiser (LoRA
  rank, alpha, dropout and targets; AdamW's settings; the schedule; batch,
  accumulation, steps, seed; DPO's beta), serialised by hone in job.json,
  with the user's `args` (TRL's own options) applied over them.

It writes, into --out: `adapter_config.json` and `adapter_model.safetensors`
(PEFT's layout, which hone's engine loads), and `metrics.jsonl`, one line a
step in hone's step-report format (the last also with the mean k3 KL to the
base on the training data's scored tokens, measured after training with
the adapter off), and TRL's checkpoints in `checkpoints/`, which a run
with `--resume` continues from. Progress goes to stderr: `hone-trl step`
and a step report as JSON each step, `hone-trl <news>` otherwise. Each
process stops itself when hone (`--hone-pid`) exits or the `--deadline`
(Unix seconds) passes.

Run by hone as `accelerate launch [--config_file F] [--num_processes N]
trl_train.py --job job.json --data data.jsonl --out DIR --hone-pid PID
--deadline T [--resume]`.
"""

import argparse
import json
import os
import shutil
import sys
import time
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

# The projections hone's LoRA may target, named as PEFT names them (hone
# serialises its targets with these names).
PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def target_modules(targets):
    unknown = [t for t in targets if t not in PROJECTIONS]
    if unknown:
        sys.exit(f"trl_train.py: unknown LoRA targets {unknown}")
    return list(targets)


def settings(job, output_dir):
    """TRL/transformers training arguments from hone's training config."""
    config = job["config"]
    optim = config["optim"]
    out = {
        "output_dir": output_dir,
        "max_steps": config["steps"],
        "per_device_train_batch_size": config["batch_size"],
        "gradient_accumulation_steps": config["accumulation"],
        "learning_rate": optim["lr"],
        "weight_decay": optim["weight_decay"],
        "adam_beta1": optim["beta1"],
        "adam_beta2": optim["beta2"],
        "adam_epsilon": optim["eps"],
        "max_grad_norm": optim["max_grad_norm"] if optim["max_grad_norm"] > 0 else 1e9,
        "warmup_steps": optim["warmup_steps"],
        "lr_scheduler_type": "cosine" if optim["schedule"] == "cosine" else "constant_with_warmup",
        "seed": config["seed"],
        "logging_steps": 1,
        # Checkpoints a job resumes from when hone restarts it.
        "save_strategy": "steps",
        "save_steps": max(1, config["steps"] // 4),
        "save_total_limit": 2,
        "report_to": [],
        "disable_tqdm": True,
        "remove_unused_columns": False,
        "use_cpu": job["device"] == "cpu",
    }
    out.update(job.get("args") or {})
    return out


def mean_kl_to_base(model, rows, method, device):
    """Mean k3 KL(policy ‖ base) over the scored tokens of the training
    rows, the base being the model with its adapter off."""
    import torch

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for row in rows[:64]:
            if method == "sft":
                sequences = [(row["input_ids"], [label != -100 for label in row["labels"]])]
            else:
                prompt = row.get("prompt_ids")
                pairs = (
                    [(prompt, row[side]) for side in ("chosen_ids", "rejected_ids")]
                    if method == "dpo"
                    else [(c["prompt_ids"], c["completion_ids"]) for c in row["completions"]]
                )
                sequences = [(p + c, [False] * len(p) + [True] * len(c)) for p, c in pairs]
            for ids, scored in sequences:
                x = torch.tensor([ids], device=device)
                policy = torch.log_softmax(model(x).logits[0, :-1].float(), -1)
                with model.disable_adapter():
                    base = torch.log_softmax(model(x).logits[0, :-1].float(), -1)
                target = x[0, 1:]
                lp = policy.gather(-1, target[:, None])[:, 0]
                lb = base.gather(-1, target[:, None])[:, 0]
                mask = torch.tensor(scored[1:], device=device)
                if mask.any():
                    d = (lb - lp)[mask]
                    total += float((torch.exp(d) - d - 1).sum())
                    count += int(mask.sum())
    return total / max(count, 1)


def grpo_trainer(job, rows, model, tokenizer, peft_config, training):
    """TRL's GRPOTrainer fed hone's planned micro-batches (one a row, in
    order, one row a process per micro-step) instead of generating."""
    import torch
    from datasets import Dataset
    from torch.utils.data import SequentialSampler
    from trl import GRPOConfig, GRPOTrainer

    grpo = job["config"]["grpo"]
    loss_type = {"token": "bnpo", "sequence": "grpo", "dr_grpo": "dr_grpo"}[grpo["aggregation"]]
    training.update(
        per_device_train_batch_size=1,
        # TRL's own batching (unused here: hone planned the batches) wants
        # whole groups of at least two generations per generation batch.
        num_generations=2,
        steps_per_generation=2,
        loss_type=loss_type,
        epsilon=grpo["epsilon_low"],
        epsilon_high=grpo["epsilon_high"],
        beta=grpo["kl_beta"],
        max_completion_length=grpo["max_completion_tokens"] or None,
    )
    for key, value in (job.get("args") or {}).items():
        training[key] = value
    pad = tokenizer.pad_token_id
    empty = {"prompt_ids": [pad], "completion_ids": [], "behaviour": None, "off_policy": False, "advantage": 0.0}

    class HoneGroups(GRPOTrainer):
        """GRPO on hone's rows: nothing generated, nothing rewarded here."""

        proximal = {}

        def get_train_dataloader(self):
            return self._get_dataloader(
                dataset=self.train_dataset,
                description="Training",
                batch_size=1,
                sampler_fn=SequentialSampler,
                is_training=True,
            )

        def _prepare_inputs(self, batch):
            return self.tensors(batch[0]["row"], rows[batch[0]["row"]]["completions"] or [empty])

        def tensors(self, index, completions, record=True):
            device = self.accelerator.device
            longest_prompt = max(len(c["prompt_ids"]) for c in completions)
            longest = max(max(len(c["completion_ids"]) for c in completions), 1)

            def padded(values, length, left, fill):
                return [fill] * (length - len(values)) + values if left else values + [fill] * (length - len(values))

            def tensor(lists, dtype):
                return torch.tensor(lists, dtype=dtype, device=device)

            prompt_ids = tensor([padded(c["prompt_ids"], longest_prompt, True, pad) for c in completions], torch.long)
            prompt_mask = tensor([padded([1] * len(c["prompt_ids"]), longest_prompt, True, 0) for c in completions], torch.long)
            completion_ids = tensor([padded(c["completion_ids"], longest, False, pad) for c in completions], torch.long)
            completion_mask = tensor([padded([1] * len(c["completion_ids"]), longest, False, 0) for c in completions], torch.long)
            inputs = {
                "prompt_ids": prompt_ids,
                "prompt_mask": prompt_mask,
                "completion_ids": completion_ids,
                "completion_mask": completion_mask,
                "advantages": tensor([c["advantage"] for c in completions], torch.float32),
            }
            ids = torch.cat([prompt_ids, completion_ids], 1)
            mask = torch.cat([prompt_mask, completion_mask], 1)
            with torch.no_grad():
                current, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, mask, longest)
                if self.beta != 0.0:
                    with self.accelerator.unwrap_model(self.model).disable_adapter():
                        inputs["ref_per_token_logps"], _, _ = self._get_per_token_logps_and_entropies(
                            self.model, ids, mask, longest
                        )
            old = current.clone()
            weight = torch.ones_like(current)
            for k, c in enumerate(completions):
                n, behaviour = len(c["completion_ids"]), c["behaviour"]
                if behaviour is None:
                    continue
                behaviour = tensor(behaviour, torch.float32)
                if c["off_policy"]:
                    old[k, :n] = self.proximal[(index, k)]
                    weight[k, :n] = torch.clamp(torch.exp(old[k, :n] - behaviour), max=grpo["is_cap"])
                else:
                    old[k, :n] = behaviour
            inputs["old_per_token_logps"] = old
            inputs["importance_sampling_ratio"] = weight
            # The figures hone's trainer reports: the mean importance ratio
            # (1 on the first step when the sampler's logprobs are the
            # policy's own) and, for off-policy tokens, the mean weight.
            mask = completion_mask.bool()
            if record and mask.any():
                self._metrics["train"]["ratio"].append(float(torch.exp(current - old)[mask].mean()))
            off = torch.tensor([c["off_policy"] and c["behaviour"] is not None for c in completions], device=device)
            off_mask = mask & off[:, None]
            if record and off_mask.any():
                self._metrics["train"]["is_weight"].append(float(weight[off_mask].mean()))
            if not grpo["max_completion_tokens"]:
                self.max_completion_length = longest
            return inputs

        def score_proximal(self):
            """Off-policy completions' logprobs under the starting policy."""
            for index, row in enumerate(rows):
                completions = row["completions"]
                if not any(c["off_policy"] and c["behaviour"] is not None for c in completions):
                    continue
                inputs = self.tensors(index, [dict(c, off_policy=False) for c in completions], record=False)
                with torch.no_grad():
                    logps, _, _ = self._get_per_token_logps_and_entropies(
                        self.model,
                        torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                        torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
                        inputs["completion_ids"].size(1),
                    )
                for k, c in enumerate(completions):
                    self.proximal[(index, k)] = logps[k, : len(c["completion_ids"])]

    def rewarded_by_hone(**kwargs):
        """TRL wants a reward source; hone's rewards are in the rows."""
        raise RuntimeError("trl_train.py: hone's groups come scored; nothing is generated or rewarded here")

    trainer = HoneGroups(
        model=model,
        reward_funcs=rewarded_by_hone,
        args=GRPOConfig(**training),
        train_dataset=Dataset.from_dict({"row": list(range(len(rows)))}),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    # TRL applies its truncated importance-sampling weights to the loss only
    # where it sampled with vLLM; hone's off-policy completions take the
    # same correction, weights computed above.
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = True
    trainer.model.eval()
    trainer.score_proximal()
    trainer.model.train()
    return trainer


def last_whole_checkpoint(folder):
    """The latest of TRL's checkpoints in `folder` that was written whole
    (a job cut off while writing one leaves it partial), or None."""
    whole = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "adapter_model.safetensors")
    found = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name)
        if name.startswith("checkpoint-") and all(os.path.exists(os.path.join(path, f)) for f in whole):
            try:
                json.load(open(os.path.join(path, "trainer_state.json")))
            except ValueError:
                continue
            found.append((int(name.rsplit("-", 1)[1]), path))
    return max(found)[1] if found else None


def watchdog(hone_pid, deadline, stop_file):
    """Stops this process when the hone that started the job has exited
    (its cycle is over: nothing would take the adapter), when hone asks
    (the stop file appears: the cycle was cancelled) or when the job's
    time limit has run out."""
    import threading

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    def watch():
        while True:
            time.sleep(1)
            if hone_pid and not alive(hone_pid):
                why = "hone, which started this job, has exited"
            elif os.path.exists(stop_file):
                why = "hone asked it to stop (the cycle ended)"
            elif deadline and time.time() > deadline:
                why = "the job's time limit has run out"
            else:
                continue
            print(f"hone-trl stopped: {why}", file=sys.stderr, flush=True)
            os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--hone-pid", type=int, default=0)
    p.add_argument("--deadline", type=float, default=0)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()
    watchdog(args.hone_pid, args.deadline, os.path.join(args.out, "stop"))
    job = json.load(open(args.job))
    method = job["method"]
    if method not in ("sft", "dpo", "grpo"):
        sys.exit(f"trl_train.py: the TRL trainer trains sft, dpo and grpo, not {method!r}")

    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    major = int(trl.__version__.split(".")[0])
    if major != 1:
        sys.exit(f"trl_train.py: needs TRL 1.x, found {trl.__version__}")
    from accelerate import PartialState

    state = PartialState()
    if state.is_main_process:
        print(f"hone-trl {method} on {state.num_processes} process(es), {state.device}", file=sys.stderr, flush=True)
    config = job["config"]
    torch.manual_seed(config["seed"])
    rows = [json.loads(line) for line in open(args.data) if line.strip()]
    tokenizer = AutoTokenizer.from_pretrained(job["base"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(job["base"], dtype=torch.float32)
    lora = config["lora"]
    peft_config = None
    if job.get("parent"):
        model = PeftModel.from_pretrained(model, job["parent"], is_trainable=True)
    else:
        peft_config = LoraConfig(
            r=lora["rank"],
            lora_alpha=lora["alpha"],
            lora_dropout=lora["dropout"],
            target_modules=target_modules(lora["targets"]),
            use_rslora=lora.get("rslora", False),
            task_type="CAUSAL_LM",
        )

    out = args.out
    metrics = os.path.join(out, "metrics.jsonl")
    started = time.time()

    class Report(TrainerCallback):
        """hone's step reports from TRL's logs (rank 0 only)."""

        def on_log(self, args_, state_, control, logs=None, **kwargs):
            if not state.is_main_process or not logs or "loss" not in logs:
                return
            extra = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and k not in ("loss", "learning_rate", "grad_norm", "epoch")}
            report = {
                "step": state_.global_step,
                "total_steps": config["steps"],
                "loss": float(logs["loss"]),
                "reward": step_rewards.get(state_.global_step),
                "kl": 0.0,
                "grad_norm": float(logs.get("grad_norm", 0.0)),
                "lr": float(logs.get("learning_rate", 0.0)),
                "tokens": 0,
                "tokens_per_second": 0.0,
                "seconds": time.time() - started,
                "extra": extra,
            }
            line = json.dumps(report)
            with open(metrics, "a") as f:
                f.write(line + "\n")
            print(f"hone-trl step {line}", file=sys.stderr, flush=True)

    scratch = os.path.join(out, "checkpoints")
    resume_from = None
    if args.resume:
        resume_from = last_whole_checkpoint(scratch)
    if state.is_main_process:
        kept = []
        if resume_from and os.path.exists(metrics):
            done = int(resume_from.rsplit("-", 1)[1])
            kept = [line for line in open(metrics).read().splitlines() if json.loads(line)["step"] <= done]
            print(f"hone-trl resuming from step {done} of {config['steps']}", file=sys.stderr, flush=True)
        with open(metrics, "w") as f:
            f.writelines(line + "\n" for line in kept)
    step_rewards = {row["step"]: row["reward"] for row in rows if method == "grpo"}
    if method == "grpo":
        trainer = grpo_trainer(job, rows, model, tokenizer, peft_config, settings(job, scratch))
    elif method == "sft":
        dataset = Dataset.from_list(rows)
        from trl import SFTConfig, SFTTrainer

        training = SFTConfig(**settings(job, scratch), max_length=None, dataset_kwargs={"skip_prepare_dataset": True})
        trainer = SFTTrainer(
            model=model, args=training, train_dataset=dataset, processing_class=tokenizer, peft_config=peft_config
        )
    else:
        from trl import DPOConfig, DPOTrainer

        dataset = Dataset.from_list(rows)

        class PreTokenised(DPOTrainer):
            """hone's pairs are token ids already: nothing to tokenise."""

            def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
                return dataset

        training = DPOConfig(**settings(job, scratch), max_length=None, beta=config["dpo_beta"])
        trainer = PreTokenised(
            model=model, args=training, train_dataset=dataset, processing_class=tokenizer, peft_config=peft_config
        )
    trainer.add_callback(Report())
    trainer.train(resume_from_checkpoint=resume_from)
    saved = os.path.join(scratch, "adapter")
    trainer.save_model(saved)
    if state.is_main_process:
        policy = trainer.model
        device = next(policy.parameters()).device
        kl = mean_kl_to_base(policy, rows, method, device)
        lines = open(metrics).read().splitlines()
        last = json.loads(lines[-1])
        last["kl"] = kl
        lines[-1] = json.dumps(last)
        open(metrics, "w").write("\n".join(lines) + "\n")
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy(os.path.join(saved, name), os.path.join(out, name))
        print(f"hone-trl done: {config['steps']} steps, KL to base {kl:.5f}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
