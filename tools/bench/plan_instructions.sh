#!/bin/bash
# What a new signature's first runs cost in instructions (callgrind), not in wall time: the figures this
# shared machine's load does not move. A first load of MODEL runs the signatures once (every program is
# built and on disk), a second load runs one other signature (SIG0), then callgrind counts only the second
# load's first runs of the signatures; callgrind_annotate --inclusive=yes OUT.1 shows where they go
# (Model::make_plan, infer_shapes, run_fusion_passes, ProgramCache::build, Session::Session, Session::run).
#
#   PYTHONPATH=build/python tools/bench/plan_instructions.sh MODEL.onnx OUT "batch=1,sequence=3" \
#       "batch=1,sequence=4" "batch=2,sequence=6" ...
#
# Signatures name each symbolic dim; int64 inputs get ids in [0, 100) (ones for *mask*), floats normals.
set -euo pipefail
python=${PYTHON:-/usr/bin/python3}  # one with numpy and the cldl module's ABI
model=$1 out=$2 sig0=$3
shift 3
marker=$(mktemp -u /tmp/plan_instructions.XXXXXX)
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "$python" - "$model" "$marker" "$sig0" "$@" \
    > "$out.log" 2>&1 <<'PY' &
import os, sys, time
import numpy as np
import cldl
model, marker, sig0, sigs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rng = np.random.default_rng(0)
def feed(m, sig):
    dims = {k: int(v) for k, v in (kv.split("=") for kv in sig.split(","))}
    f = {}
    for i in m.get_inputs():
        shape = tuple(dims[d] if isinstance(d, str) else d for d in i.shape)
        if i.type == "tensor(int64)":
            f[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, 100, shape).astype(np.int64)
        else:
            f[i.name] = rng.standard_normal(shape).astype(np.float32)
    return f
warm = cldl.load(model)
for s in sigs:
    warm.run(None, feed(warm, s))
m = cldl.load(model)
m.run(None, feed(m, sig0))
feeds = [feed(m, s) for s in sigs]
open(marker + ".ready", "w").close()
while not os.path.exists(marker):
    time.sleep(0.05)
for f in feeds:
    m.run(None, f)
open(marker + ".done", "w").close()
while os.path.exists(marker):
    time.sleep(0.05)
print(m.plan_cache)
PY
pid=$!
while [ ! -e "$marker.ready" ]; do
  kill -0 "$pid" 2> /dev/null || { echo "the measured process ended early: see $out.log" >&2; exit 1; }
  sleep 1
done
callgrind_control -i on "$pid" > /dev/null
touch "$marker"
while [ ! -e "$marker.done" ]; do sleep 1; done
callgrind_control -i off "$pid" > /dev/null
callgrind_control -d "$pid" > /dev/null
rm -f "$marker"
wait "$pid"
rm -f "$marker.ready" "$marker.done"
echo "callgrind data: $out.1 (the measured runs), log: $out.log"
