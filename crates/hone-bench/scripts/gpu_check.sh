#!/bin/bash
# The GPU tables of docs/benchmarks.md: hone built with `--features cuda`
# against Hugging Face transformers and TRL on the same GPU, three runs each,
# written as result files (command, commit, date, machine) to $OUT.
#
#   HONE=target/release/hone PYTHON=python3 OUT=gpu-check bash crates/hone-bench/scripts/gpu_check.sh
#
# Needs an NVIDIA GPU, the CUDA libraries hone links (cuBLAS, cuRAND, NVRTC,
# the runtime) on LD_LIBRARY_PATH, and a Python with torch and transformers
# (and peft, trl and datasets for the trainer's table). The steps run in
# order of what matters most; each writes its file when it ends. Ends with
# the serving parity: the same checkpoint served on the CPU and on the GPU,
# each checked against transformers on the GPU, teacher-forced.
set -u
HONE=${HONE:-target/release/hone}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-gpu-check}
RUNS=${RUNS:-3}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'pkill -f "$HONE serve" 2>/dev/null; rm -rf "$work"' EXIT
nvidia-smi -L | tee "$OUT/gpu.txt"
engine() { # name, then hone bench engine's arguments
  local name=$1
  shift
  "$HONE" bench engine --device cuda --python "$PYTHON" --runs "$RUNS" --reps 5 --out "$OUT/$name.json" "$@" 2>&1 \
    | tee "$OUT/$name.log"
}
engine engine-cuda-f32 --presets tiny,qwen2.5-0.5b
engine engine-cuda-bf16 --dtype bf16 --presets qwen2.5-0.5b
engine engine-cuda-f32-p1024 --presets qwen2.5-0.5b --prompt 1024 --new-tokens 32
"$HONE" bench train --device cuda --presets tiny,qwen2.5-0.5b --python "$PYTHON" --runs "$RUNS" \
  --out "$OUT/train-cuda.json" 2>&1 | tee "$OUT/train-cuda.log"
engine engine-cuda-bf16-p1024 --dtype bf16 --presets qwen2.5-0.5b --prompt 1024 --new-tokens 32
for preset in ${PARITY_PRESETS:-qwen2.5-0.5b}; do
  "$HONE" model init --arch qwen2 --preset "$preset" --out "$work/$preset" >/dev/null
  for device in cpu cuda; do
    port=$([ "$device" = cpu ] && echo 7071 || echo 7072)
    mkdir -p "$work/serve-$device"
    sed -e "s/device = \"cpu\"/device = \"$device\"/" -e "s/127.0.0.1:7070/127.0.0.1:$port/" \
      examples/local.toml >"$work/serve-$device/hone.toml"
    (cd "$work/serve-$device" && HONE_MODEL_DIR="$work/$preset" "$HONE" serve --config hone.toml >serve.log 2>&1 &)
  done
  for _ in $(seq 60); do
    curl -sf localhost:7071/health >/dev/null && curl -sf localhost:7072/health >/dev/null && break
    sleep 1
  done
  "$PYTHON" crates/hone-bench/python/serve_parity.py --max-tokens 16 --model "$work/$preset" --device cuda \
    --url http://127.0.0.1:7071 --url http://127.0.0.1:7072 | tee "$OUT/parity-$preset.json"
  pkill -f "$HONE serve"
  sleep 2
done
