"""The --serve loop shared by the ONNX Runtime peers of `cldl bench rnn` and `cldl bench attention`
(tools/cldl/bench_peer.cpp speaks to it): prints the ready line, then answers each stdin line
`run <case>` with one timed run of that case as {"case", "ms", "cpu_ms"}; `quit` or EOF ends it."""
import json
import sys
import time


def serve_loop(sessions, names, notes):
    """sessions: case id -> (onnxruntime session, feeds); names / notes: case id -> text."""
    print(json.dumps({"ready": True, "cases": list(sessions), "names": names, "notes": notes}), flush=True)
    for line in iter(sys.stdin.readline, ""):
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] != "run" or len(words) != 2 or words[1] not in sessions:
            print(json.dumps({"error": f"unknown request '{line.strip()}'"}), flush=True)
            continue
        sess, feeds = sessions[words[1]]
        sess.run(None, feeds)  # untimed, right before: the timed run starts warm, not from the pause
        c0 = time.process_time()
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ms = (time.perf_counter() - t0) * 1e3
        print(json.dumps({"case": words[1], "ms": ms, "cpu_ms": (time.process_time() - c0) * 1e3}), flush=True)
