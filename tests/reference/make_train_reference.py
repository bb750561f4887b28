"""Reference values for hone-train's tests: SFT, GRPO and DPO losses and the
gradients of every LoRA tensor, computed by PyTorch autograd through Hugging
Face transformers + PEFT on the tiny checkpoints `hone model init` writes.

The losses are written here from their papers (GRPO with PPO clipping and
the k3 KL as TRL computes it, sigmoid DPO, token-mean NLL), independently of
the Rust code. Run by hand (not part of the test suite):

    python3 -m venv /tmp/refenv
    /tmp/refenv/bin/pip install torch transformers peft safetensors
    /tmp/refenv/bin/python tests/reference/make_train_reference.py

It writes, per architecture, tests/reference/train/<arch>/:
  adapter/           the LoRA adapter the values were computed with (PEFT format)
  batch.json         the sequences (token ids, scored mask), rewards,
                     behaviour logprobs, options, and the loss values
  grads.safetensors  `<loss>/<peft tensor name>` → gradient
  exported/          an adapter trained and exported by `hone train sft`,
                     which PeftModel.from_pretrained loads; batch.json holds
                     the logits PEFT computes with it (`exported_logits`)
"""

import json
import pathlib
import subprocess
import tempfile

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SEED = 0
VOCAB = 320


def sequences(gen):
    """Prompt + completion token ids, the completion scored except a
    'tool result' stretch in the middle of some."""
    out = []
    for prompt_len, completion_len, hole in [(5, 7, None), (3, 9, (3, 6)), (8, 4, None), (4, 6, (2, 3))]:
        tokens = torch.randint(0, VOCAB, (prompt_len + completion_len,), generator=gen).tolist()
        scored = [False] * prompt_len + [True] * completion_len
        if hole:
            for i in range(prompt_len + hole[0], prompt_len + hole[1]):
                scored[i] = False
        out.append({"tokens": tokens, "scored": scored})
    return out


def scored_logprobs(model, seq):
    ids = torch.tensor([seq["tokens"]])
    logits = model(ids).logits[0].float()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    picked = logp.gather(1, ids[0, 1:, None])[:, 0]
    mask = torch.tensor(seq["scored"][1:])
    return picked[mask]


def grads_of(model, loss, prefix, into):
    model.zero_grad()
    loss.backward()
    for name, p in model.named_parameters():
        if "lora_" in name:
            # PEFT's in-memory name → its saved name (drop the adapter name).
            saved = name.replace(".default", "")
            into[f"{prefix}/{saved}"] = p.grad.detach().clone().contiguous()


def grpo(lps, behaviour, ref, advantages, eps_low, eps_high, beta, aggregation):
    per_seq = []
    for lp, old, r, a in zip(lps, behaviour, ref, advantages):
        ratio = torch.exp(lp - old)
        clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
        loss = -torch.minimum(ratio * a, clipped * a)
        if beta > 0:
            kl = torch.exp(r - lp) - (r - lp) - 1
            loss = loss + beta * kl
        per_seq.append(loss)
    if aggregation == "token":
        return torch.cat(per_seq).sum() / sum(len(x) for x in per_seq)
    if aggregation == "sequence":
        return torch.stack([x.mean() for x in per_seq]).mean()
    longest = max(len(x) for x in per_seq)
    return torch.cat(per_seq).sum() / (len(per_seq) * longest)


def make(arch, workdir):
    model_dir = workdir / arch
    subprocess.run(
        ["cargo", "run", "-q", "-p", "hone", "--", "model", "init", "--arch", arch, "--preset", "tiny",
         "--seed", str(SEED), "--out", str(model_dir)],
        cwd=ROOT, check=True,
    )
    base = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    torch.manual_seed(SEED)
    config = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        init_lora_weights=False,
    )
    model = get_peft_model(base, config)
    model.train()
    out_dir = HERE / "train" / arch
    model.save_pretrained(out_dir / "adapter")

    gen = torch.Generator().manual_seed(SEED)
    seqs = sequences(gen)
    grads = {}
    losses = {}

    # SFT on all four.
    lps = [scored_logprobs(model, s) for s in seqs]
    sft = -torch.cat(lps).sum() / sum(len(x) for x in lps)
    losses["sft"] = sft.item()
    grads_of(model, sft, "sft", grads)

    # GRPO: one group of four with stale behaviour logprobs, KL to LoRA-off.
    rewards = [1.0, 0.0, 0.5, 0.0]
    r = torch.tensor(rewards)
    advantages = ((r - r.mean()) / (r.std() + 1e-4)).tolist()
    with torch.no_grad():
        with model.disable_adapter():
            ref = [scored_logprobs(model, s) for s in seqs]
        current = [scored_logprobs(model, s) for s in seqs]
    noise = torch.Generator().manual_seed(SEED + 1)
    behaviour = [(c + 0.3 * torch.randn(c.shape, generator=noise)).clamp(max=-1e-3) for c in current]
    options = {"epsilon_low": 0.2, "epsilon_high": 0.28, "kl_beta": 0.04}
    for aggregation in ["token", "sequence", "dr_grpo"]:
        lps = [scored_logprobs(model, s) for s in seqs]
        loss = grpo(lps, behaviour, ref, advantages, options["epsilon_low"], options["epsilon_high"],
                    options["kl_beta"], aggregation)
        losses[f"grpo_{aggregation}"] = loss.item()
        grads_of(model, loss, f"grpo_{aggregation}", grads)

    # DPO: pairs (0 chosen, 1 rejected), (2 chosen, 3 rejected); same prompts are not needed for the math.
    beta = 0.1
    lps = [scored_logprobs(model, s) for s in seqs]
    pi = [x.sum() for x in lps]
    rf = [x.sum() for x in ref]
    z = [beta * ((pi[c] - rf[c]) - (pi[j] - rf[j])) for c, j in [(0, 1), (2, 3)]]
    dpo = torch.stack([-torch.nn.functional.logsigmoid(v) for v in z]).mean()
    losses["dpo"] = dpo.item()
    grads_of(model, dpo, "dpo", grads)

    save_file(grads, out_dir / "grads.safetensors")

    # An adapter trained and exported by hone, read by PEFT.
    data = workdir / f"{arch}-sft.jsonl"
    data.write_text("".join(json.dumps({"prompt_tokens": s["tokens"][:3], "completion_tokens": s["tokens"][3:]}) + "\n"
                            for s in seqs))
    exported = out_dir / "exported"
    subprocess.run(
        ["cargo", "run", "-q", "-p", "hone", "--", "train", "sft", "--base", str(model_dir), "--data", str(data),
         "--out", str(workdir / f"{arch}-run"), "--steps", "3", "--rank", "4", "--alpha", "8", "--dropout", "0",
         "--lr", "0.01", "--seed", "0"],
        cwd=ROOT, check=True,
    )
    exported.mkdir(exist_ok=True)
    for name in ["adapter_config.json", "adapter_model.safetensors"]:
        (exported / name).write_bytes((workdir / f"{arch}-run" / name).read_bytes())
    fresh = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    peft_loaded = PeftModel.from_pretrained(fresh, exported)
    peft_loaded.eval()
    exported_ids = seqs[0]["tokens"]
    with torch.no_grad():
        exported_logits = peft_loaded(torch.tensor([exported_ids])).logits[0]
    batch = {
        "arch": arch,
        "seed": SEED,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "peft": __import__("peft").__version__,
        "sequences": seqs,
        "rewards": rewards,
        "advantages": advantages,
        "behaviour": [b.tolist() for b in behaviour],
        "reference": [x.tolist() for x in ref],
        "grpo": options,
        "dpo_beta": beta,
        "losses": losses,
        "exported_ids": exported_ids,
        "exported_logits": [float(x) for x in exported_logits.flatten().tolist()],
    }
    (out_dir / "batch.json").write_text(json.dumps(batch, indent=1) + "\n")
    print(f"{arch}: " + ", ".join(f"{k} {v:.6f}" for k, v in losses.items()))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ["qwen2", "llama"]:
            make(arch, pathlib.Path(tmp))


if __name__ == "__main__":
    main()
