"""TRL's side of `hone bench train`: the GRPO training step of TRL's
GRPOTrainer (its `compute_loss` on pre-generated completions, then
backward, gradient clipping and AdamW) with a PEFT LoRA adapter, on the
checkpoint and the token batch hone measured. Prints one JSON line.

Run by `hone bench train --python PY`; needs torch, transformers, peft, trl
and datasets.
"""

import argparse
import json
import statistics
import tempfile
import time
import warnings

import torch

warnings.filterwarnings("ignore")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--batch", required=True, help="JSON: prompts, completions, advantages, settings")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    args = p.parse_args()
    device = torch.device(args.device)

    def wait():
        if device.type == "cuda":
            torch.cuda.synchronize()
    batch = json.load(open(args.batch))

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(device)
    g = len(batch["completions"])
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            use_cpu=device.type == "cpu",
            per_device_train_batch_size=g,
            num_generations=g,
            max_completion_length=len(batch["completions"][0]),
            beta=0.0,
            epsilon=batch["epsilon_low"],
            epsilon_high=batch["epsilon_high"],
            loss_type="bnpo",
            learning_rate=batch["lr"],
            report_to=[],
            bf16=False,
        )
        lora = LoraConfig(
            r=batch["rank"],
            lora_alpha=batch["alpha"],
            lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            task_type="CAUSAL_LM",
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=lambda completions, **kw: [0.0] * len(completions),
            args=config,
            train_dataset=Dataset.from_dict({"prompt": ["x"] * g}),
            peft_config=lora,
        )
        policy = trainer.model
        policy.train()
        # Set by Trainer.training_step, which generation-free use bypasses.
        trainer.current_gradient_accumulation_steps = 1
        prompt = torch.tensor(batch["prompts"], device=device)
        completion = torch.tensor(batch["completions"], device=device)
        inputs = {
            "prompt_ids": prompt,
            "prompt_mask": torch.ones_like(prompt),
            "completion_ids": completion,
            "completion_mask": torch.ones_like(completion),
            "advantages": torch.tensor(batch["advantages"], dtype=torch.float32, device=device),
            "num_items_in_batch": int(completion.numel()),
        }
        params = [p for p in policy.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=batch["lr"], weight_decay=0.0)
        times = []
        for rep in range(args.reps + 1):
            wait()
            start = time.perf_counter()
            loss = trainer.compute_loss(policy, inputs)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad()
            wait()
            if rep > 0:  # the first is warm-up
                times.append(time.perf_counter() - start)

    # The square product hone's peak starts from: 2048³ on the CPU, 8192³ on a GPU.
    n = 2048 if device.type == "cpu" else 8192
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    for _ in range(2):
        a @ b
    mm = []
    for _ in range(5):
        wait()
        start = time.perf_counter()
        a @ b
        wait()
        mm.append(time.perf_counter() - start)
    print(json.dumps({
        "step_seconds": statistics.median(times),
        "matmul_gflops": 2 * n**3 / statistics.median(mm) / 1e9,
        "threads": torch.get_num_threads(),
        "trl": __import__("trl").__version__,
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
