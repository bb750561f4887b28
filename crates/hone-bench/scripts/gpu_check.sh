#!/bin/bash
# The GPU check behind docs/ARCHITECTURE.md, "On a GPU": hone built with
# `--features cuda` against Hugging Face transformers on the same GPU.
#
#   HONE=target/release/hone PYTHON=python3 OUT=gpu-check bash crates/hone-bench/scripts/gpu_check.sh
#
# Needs an NVIDIA GPU, the CUDA libraries hone links (cuBLAS, cuRAND, the
# runtime) on LD_LIBRARY_PATH, and a Python with torch and transformers.
# Writes the engine and trainer tables and the serving parity to $OUT.
set -u
HONE=${HONE:-target/release/hone}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'pkill -f "$HONE serve" 2>/dev/null; rm -rf "$work"' EXIT
nvidia-smi -L
"$HONE" bench engine --device cuda --presets tiny,qwen2.5-0.5b --python "$PYTHON" --reps 5 | tee "$OUT/engine-cuda-f32.md"
"$HONE" bench engine --device cuda --dtype bf16 --presets qwen2.5-0.5b --python "$PYTHON" --reps 5 | tee "$OUT/engine-cuda-bf16.md"
"$HONE" bench engine --device cuda --presets qwen2.5-0.5b --prompt 1024 --new-tokens 32 --python "$PYTHON" --reps 3 | tee "$OUT/engine-cuda-f32-p1024.md"
"$HONE" bench train --device cuda --presets tiny,qwen2.5-0.5b | tee "$OUT/train-cuda.md"
# The gateway serving the same checkpoint on the CPU and on the GPU, each
# checked against transformers on the GPU, teacher-forced.
for preset in tiny qwen2.5-0.5b; do
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
