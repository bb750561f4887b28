#!/usr/bin/env bash
# A full learning cycle on the embedded tiny model, no network, no GPU:
# traffic with gold answers → rewards → datasets → candidates (sft, model,
# examples) → evaluation → gate → Pareto front → auto-deploy as a canary →
# online monitors → promote or roll back. Prints each stage.
#
#   examples/learn-demo.sh            # builds hone (dev profile) if needed
#   HONE=target/release/hone examples/learn-demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

HONE=${HONE:-target/debug/hone}
[ -x "$HONE" ] || cargo build -p hone
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hone-learn-demo.XXXX")
PORT=${PORT:-17070}
URL="http://127.0.0.1:$PORT"
stage() { printf '\n=== %s\n' "$*"; }

stage "a tiny random Qwen2 checkpoint in $WORK/model"
"$HONE" model init --arch qwen2 --preset tiny --out "$WORK/model" --seed 7 >/dev/null
export HONE_MODEL_DIR="$WORK/model"
CONFIG=examples/learn.toml
COMMON=(--config "$CONFIG" --data-dir "$WORK/data")

stage "hone serve on $URL"
"$HONE" serve "${COMMON[@]}" --listen "127.0.0.1:$PORT" 2>"$WORK/serve.log" &
SERVE=$!
trap 'kill $SERVE 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "$URL/health" >/dev/null && break; sleep 0.1; done

traffic() { # $1: episode prefix, $2: count
  for i in $(seq 1 "$2"); do
    n=$((RANDOM % 100)); gold=no; [ $((n % 2)) -eq 0 ] && gold=yes
    answer=$(curl -sf "$URL/v1/chat/completions" -H 'content-type: application/json' \
      -H "x-hone-episode: $1-$i" \
      -d "{\"model\":\"parity\",\"messages\":[{\"role\":\"user\",\"content\":\"Is $n even? Answer yes or no.\"}]}" |
      python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["choices"][0]["message"]["content"]))')
    curl -sf "$URL/v1/feedback" -H 'content-type: application/json' \
      -d "{\"episode_id\":\"$1-$i\",\"name\":\"gold\",\"value\":\"$gold\"}" >/dev/null
    [ "$i" -le 3 ] && echo "  $1-$i: Is $n even? → $answer (gold: $gold)"
  done
  echo "  … $2 episodes recorded, each with its gold answer as feedback"
}

stage "production traffic on the champion (v1, the untrained model)"
traffic t 40

stage "hone learn parity --once (the cycle, step by step)"
"$HONE" learn parity --once "${COMMON[@]}" --gateway "$URL" || true

stage "hone learn status"
"$HONE" learn status "${COMMON[@]}"
stage "hone front parity"
"$HONE" front parity "${COMMON[@]}"

stage "more traffic: the gateway now splits new episodes between champion and canary"
traffic u 40
stage "hone learn parity --once (the monitors look at the canary)"
"$HONE" learn parity --once "${COMMON[@]}" --gateway "$URL" || true

stage "hone learn status"
"$HONE" learn status "${COMMON[@]}"
stage "hone alerts"
"$HONE" alerts "${COMMON[@]}"
stage "hone history parity"
"$HONE" history parity "${COMMON[@]}"
echo
echo "data kept in $WORK"
