"""Reference values for hone-engine's tests, computed by Hugging Face
transformers and PEFT on the tiny checkpoints `hone model init` writes.

Run by hand (it is not part of the test suite) after changing the tiny
presets, the chat template or the inputs below:

    python3 -m venv /tmp/refenv
    /tmp/refenv/bin/pip install torch transformers peft safetensors
    /tmp/refenv/bin/python tests/reference/make_reference.py

It writes tests/reference/<arch>.json (input ids, logits with and without a
LoRA adapter, a chat rendered with tools) and the adapters themselves, in
PEFT's own format, under tests/reference/adapters/<arch>/.
"""

import json
import pathlib
import subprocess
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SEED = 0

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"], "type": "string"}},
                "required": ["city"],
            },
        },
    }
]

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 3}"},
    {"role": "assistant", "content": "3 °C, grey."},
    {"role": "user", "content": "Danke! Und morgen?"},
]

PLAIN = [{"role": "user", "content": "hi"}]


def floats(t):
    return [float(x) for x in t.flatten().tolist()]


def make(arch, workdir):
    model_dir = workdir / arch
    subprocess.run(
        ["cargo", "run", "-q", "-p", "hone", "--", "model", "init", "--arch", arch, "--preset", "tiny",
         "--seed", str(SEED), "--out", str(model_dir)],
        cwd=ROOT, check=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()

    text = "Hello, hone! Ünïcödé and <tool_call> tags."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    second = list(range(40, 40 + len(ids)))
    batch = torch.tensor([ids, second])
    with torch.no_grad():
        logits = model(batch).logits

    torch.manual_seed(SEED)
    config = LoraConfig(
        r=4,
        lora_alpha=8,  # alpha != r: the scale must be alpha / r = 2
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        init_lora_weights=False,  # random A and B, so the adapter changes the output
    )
    peft_model = get_peft_model(model, config)
    # Scale B up so the LoRA term is far above the comparison tolerance.
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(10.0)
    peft_model.eval()
    with torch.no_grad():
        lora_logits = peft_model(batch).logits
    adapter_dir = HERE / "adapters" / arch
    peft_model.save_pretrained(adapter_dir)

    chat_text = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    plain_text = tokenizer.apply_chat_template(PLAIN, tokenize=False, add_generation_prompt=True)
    out = {
        "arch": arch,
        "seed": SEED,
        "transformers": __import__("transformers").__version__,
        "peft": __import__("peft").__version__,
        "torch": torch.__version__,
        "text": text,
        "input_ids": [ids, second],
        "logits_shape": list(logits.shape),
        "logits": floats(logits),
        "lora_logits": floats(lora_logits),
        "chat": {
            "messages": MESSAGES,
            "tools": TOOLS,
            "text": chat_text,
            "ids": tokenizer(chat_text, add_special_tokens=False)["input_ids"],
            "plain_messages": PLAIN,
            "plain_text": plain_text,
        },
    }
    (HERE / f"{arch}.json").write_text(json.dumps(out, ensure_ascii=False) + "\n")
    print(f"{arch}: logits {list(logits.shape)}, max |lora - base| = {(lora_logits - logits).abs().max():.4f}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ["qwen2", "llama"]:
            make(arch, pathlib.Path(tmp))


if __name__ == "__main__":
    main()
