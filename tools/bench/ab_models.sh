#!/usr/bin/env bash
# Two cldl builds on the same models, in alternating rounds: `cldl bench MODEL ... --json` median ms, so a
# change to the model layer shows as A vs B measured in one run on one machine.
#   tools/bench/ab_models.sh A/cldl B/cldl [ROUNDS]
# Models: the zoo's digits_cnn at batch 1 and 450, and tests/data/dynamic's CNN and BERT-style encoder
# at fixed dims (random inputs).
set -euo pipefail
a=$1 b=$2 rounds=${3:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
median() { "$1" bench "${@:2}" --runs 40 --warmup 5 --json 2>/dev/null | python3 -c "import json, sys; print(round(json.load(sys.stdin)['median_ms'], 3))"; }
while read -r model dims; do
  ra=() rb=()
  for ((r = 0; r < rounds; ++r)); do
    # shellcheck disable=SC2086
    ra+=("$(median "$a" "$root/$model" $dims --random)")
    # shellcheck disable=SC2086
    rb+=("$(median "$b" "$root/$model" $dims --random)")
  done
  echo "$model $dims | A ${ra[*]} | B ${rb[*]}"
done <<'MODELS'
models/zoo/digits_cnn/model.onnx --dim N=1
models/zoo/digits_cnn/model.onnx --dim N=450
tests/data/dynamic/cnn.onnx --dim batch=2 --dim height=64 --dim width=64
tests/data/dynamic/bert_opset14.onnx --dim batch=4 --dim sequence=64
MODELS
