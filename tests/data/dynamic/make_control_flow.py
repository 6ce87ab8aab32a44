#!/usr/bin/python3
"""Control flow decided by run-time data, for tests/test_control_flow_dynamic.cpp: Loops and Scans that run
zero iterations (empty scan outputs), lists built across staged plans (a Loop's trip count or a while's
condition computed from the data, appending to a list), and an If nested in a Loop body. torch.jit.script
exports (Debian's python3-torch) and hand-made models (the onnx helper), with ONNX Runtime's outputs at
chosen inputs. Run from the repository root (see make.py for the Python):
    /tmp/venv/bin/python tests/data/dynamic/make_control_flow.py
Writes tests/data/dynamic/<model>.onnx and <model>/<k>_<name>.npy (inputs and ORT's outputs of case k)."""
import os
from typing import List

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper
from torch import Tensor, nn

HERE = os.path.dirname(os.path.abspath(__file__))


def save_cases(name, feeds):
    """ORT's outputs for each feed, from the model with its input dims fixed to the feed's shapes: at zero
    iterations ORT takes a scan output's element shape from its shape inference of the body, and gives a
    dim it left symbolic the size 0 (ONNX: the body's shape, here the input's size)."""
    path = os.path.join(HERE, name + ".onnx")
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    for k, feed in enumerate(feeds):
        model = onnx.load(path)
        for i in model.graph.input:
            for d, size in zip(i.type.tensor_type.shape.dim, feed[i.name].shape):
                d.dim_value = size
        model = onnx.shape_inference.infer_shapes(model)
        # A Loop body's inputs declared without shapes get their loop-carried values' (ONNX's inference
        # keeps what a subgraph declares), then inference reaches the body's outputs.
        known = {v.name: v.type for v in list(model.graph.input) + list(model.graph.value_info)}
        for n in model.graph.node:
            if n.op_type == "Loop":
                body = n.attribute[0].g
                for outer, inner in zip(n.input[2:], body.input[2:]):
                    if outer in known:
                        inner.type.CopyFrom(known[outer])
        model = onnx.shape_inference.infer_shapes(model)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = sess.run(None, feed)
        for n, v in feed.items():
            np.save(os.path.join(folder, f"{k}_{n}.npy"), v)
        for o, v in zip(sess.get_outputs(), outs):
            np.save(os.path.join(folder, f"{k}_{o.name}.npy"), v)


class CountLoop(nn.Module):
    """A for over a count computed from the data (a Loop whose trip count is run-time data: a staged plan),
    appending to a list that starts with the input (SequenceConstruct before the Loop, SequenceInsert in
    its body), then torch.cat and torch.stack (ConcatFromSequence). At count 0 the Loop runs no iteration."""

    def forward(self, x):
        n = int((x > 0.5).sum())
        acc = x.clone()
        outs: List[Tensor] = [x]
        for i in range(n):
            acc = acc * 0.5 + float(i)
            outs.append(acc)
        return acc, torch.cat(outs, 0), torch.stack(outs, 0)


class WhileList(nn.Module):
    """A while on the data's sum appending to a list (SequenceEmpty before the Loop): every iteration ends a
    stage, and the list so far crosses each boundary."""

    def forward(self, x):
        outs: List[Tensor] = []
        acc = x
        while bool(acc.sum() < 10.0):
            acc = acc * 1.5 + 1.0
            outs.append(acc[1:] - acc[:-1])
        outs.append(x[1:])
        return torch.stack(outs, 0), torch.cat(outs, 0)


class Nested(nn.Module):
    """An if on the data inside a for over a count from the data, reading values of the outer scope."""

    def forward(self, x, y):
        acc = torch.zeros_like(x)
        n = int((x > 0).sum())
        for i in range(n):
            if bool(acc.sum() > y.sum()):
                acc = acc - y
            else:
                acc = acc + x * float(i + 1)
        return acc


def scripted():
    for name, mod, args, names, outs in [
            ("count_loop", CountLoop(), (torch.randn(2, 3),), ["x"], ["acc", "cat", "stacked"]),
            ("while_list", WhileList(), (torch.randn(3),), ["x"], ["stacked", "cat"]),
            ("nested_if_loop", Nested(), (torch.randn(4), torch.randn(4)), ["x", "y"], ["acc"])]:
        torch.onnx.export(torch.jit.script(mod), args, os.path.join(HERE, name + ".onnx"), input_names=names,
                          output_names=outs, dynamic_axes={n: {0: "n"} for n in names}, opset_version=13)
    f = np.float32
    # Trip counts 0, 1 and 5 (the elements above 0.5), then 2 at another shape.
    save_cases("count_loop", [{"x": np.full((2, 3), -1, f)}, {"x": np.array([[1, -1, -1], [0, 0, 0]], f)},
                              {"x": np.array([[1, 1, 1], [1, 1, 0]], f)}, {"x": np.array([[0.7, 0.2, 0.1], [0.9, 0, 0], [0.1, 0, 0]], f)}])
    # 0 iterations (sum already >= 10), 1, several, at three lengths.
    save_cases("while_list", [{"x": np.array([3, 4, 5], f)}, {"x": np.array([3, 2, 4], f)},
                              {"x": np.array([0.1, 0.2, -0.3, 0.5], f)}, {"x": np.array([-1, 0.5], f)},
                              {"x": np.array([0.25, 0.5, 1, 2, 3], f)}])
    rng = np.random.default_rng(24)
    save_cases("nested_if_loop", [{"x": rng.standard_normal(n).astype(f), "y": rng.uniform(0, 0.5, n).astype(f)}
                                  for n in (4, 7, 1, 7, 12)] + [{"x": np.full(3, -1, f), "y": np.ones(3, f)}])


def loop_scan():
    """Two Loops with scan outputs: one whose trip count is computed from the data (the count of elements
    of x above 0.5: staged), one whose trip count is the graph input m (it joins the signature). The body
    halves the carried value and adds the iteration number; scan outputs are that value [n, 3] and its row
    sums [n] (int64: a Cast). Downstream, the scans meet other values: Concat with x, ReduceSum over the
    iterations, Shape."""
    i64, f32 = TensorProto.INT64, TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_f"], to=f32),
         helper.make_node("Mul", ["acc", "half"], ["h"]),
         helper.make_node("Add", ["h", "i_f"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out", "one"], ["row"], keepdims=0),
         helper.make_node("Cast", ["row"], ["row_i"], to=i64),
         helper.make_node("Identity", ["acc_out"], ["acc_scan"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", f32, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", f32, None),
         helper.make_tensor_value_info("acc_scan", f32, None), helper.make_tensor_value_info("row_i", i64, None)],
        [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "half"),
         onnx.numpy_helper.from_array(np.array([1], np.int64), "one")])
    nodes = [
        helper.make_node("Greater", ["x", "threshold"], ["above"]),
        helper.make_node("Cast", ["above"], ["above_i"], to=i64),
        helper.make_node("ReduceSum", ["above_i"], ["count"], keepdims=0),
        helper.make_node("Loop", ["count", "", "x"], ["acc", "scans", "rows"], body=body),
        helper.make_node("Loop", ["m", "", "x"], ["acc_m", "scans_m", "rows_m"], body=body),
        helper.make_node("Unsqueeze", ["x", "zero"], ["x1"]),
        helper.make_node("Concat", ["scans", "x1"], ["with_x"], axis=0),
        helper.make_node("ReduceSum", ["scans_m", "zero"], ["total_m"], keepdims=0),
        helper.make_node("Shape", ["rows"], ["rows_shape"]),
    ]
    g = helper.make_graph(
        nodes, "loop_scan",
        [helper.make_tensor_value_info("x", f32, ["n", 3]), helper.make_tensor_value_info("m", i64, [])],
        [helper.make_tensor_value_info(v, t, None) for v, t in
         [("acc", f32), ("scans", f32), ("rows", i64), ("acc_m", f32), ("scans_m", f32), ("rows_m", i64),
          ("with_x", f32), ("total_m", f32), ("rows_shape", i64)]],
        [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "threshold"),
         onnx.numpy_helper.from_array(np.array([0], np.int64), "zero")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(HERE, "loop_scan.onnx"))
    f = np.float32
    feeds = []
    for x, m in [(np.full((2, 3), -1, f), 0), (np.array([[1, -1, -1], [0, 0, 0]], f), 1),
                 (np.array([[1, 1, 1], [1, 1, 0]], f), 5), (np.array([[0.1, 0.2, 0.3]], f), 0),
                 (np.array([[0.9, 0.2, 0.3]], f), 3)]:
        feeds.append({"x": x, "m": np.array(m, np.int64)})
    save_cases("loop_scan", feeds)


def scan_zero():
    """Scan (opset 11) over a symbolic number of steps t, with a state [3] and scan outputs along axis 0 and
    axis 1 (reversed); t = 0 gives empty scan outputs and the state unchanged."""
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "xt"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "two"], ["y"]),
         helper.make_node("ReduceMax", ["s_out"], ["z"], keepdims=1)],
        "body", [helper.make_tensor_value_info("s", f32, [3]), helper.make_tensor_value_info("xt", f32, [3])],
        [helper.make_tensor_value_info("s_out", f32, [3]), helper.make_tensor_value_info("y", f32, [3]),
         helper.make_tensor_value_info("z", f32, [1])],
        [onnx.numpy_helper.from_array(np.array(2, np.float32), "two")])
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["s", "ys", "zs"], body=body, num_scan_inputs=1,
                              scan_output_axes=[0, 1], scan_output_directions=[0, 1]),
             helper.make_node("Unsqueeze", ["s0"], ["s0_row"], axes=[0]),
             helper.make_node("Concat", ["ys", "s0_row"], ["ys_and_s0"], axis=0),
             helper.make_node("ReduceSum", ["ys"], ["ys_sum"], axes=[0], keepdims=0)]
    g = helper.make_graph(
        nodes, "scan_zero",
        [helper.make_tensor_value_info("s0", f32, [3]), helper.make_tensor_value_info("xs", f32, ["t", 3])],
        [helper.make_tensor_value_info(v, f32, None) for v in ["s", "ys", "zs", "ys_and_s0", "ys_sum"]])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), os.path.join(HERE, "scan_zero.onnx"))
    # ONNX Runtime 1.32 fails a Scan over zero steps ("Invalid dim0_offset of 0"), so the outputs are
    # computed here with NumPy, after checking that ORT gives the same at 1 and 5 steps.
    rng = np.random.default_rng(11)
    folder = os.path.join(HERE, "scan_zero")
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    sess = ort.InferenceSession(os.path.join(HERE, "scan_zero.onnx"), providers=["CPUExecutionProvider"])
    for k, t in enumerate((0, 1, 5, 0)):
        s0, xs = rng.standard_normal(3).astype(np.float32), rng.standard_normal((t, 3)).astype(np.float32)
        states = s0 + np.cumsum(xs, 0, dtype=np.float32)  # [t, 3]: the state after each step
        ys = states * np.float32(2)
        zs = states.max(1, keepdims=True)[::-1].T.reshape(1, t)  # [1] per step, along axis 1, reversed
        want = {"s": states[-1] if t else s0, "ys": ys, "zs": zs, "ys_and_s0": np.concatenate([ys, s0[None]], 0),
                "ys_sum": ys.sum(0, dtype=np.float32)}
        if t:
            for o, v in zip(sess.get_outputs(), sess.run(None, {"s0": s0, "xs": xs})):
                assert v.shape == want[o.name].shape and np.allclose(v, want[o.name], 1e-5, 1e-6), o.name
        for n, v in {"s0": s0, "xs": xs, **want}.items():
            np.save(os.path.join(folder, f"{k}_{n}.npy"), np.ascontiguousarray(v, dtype=np.float32))


def main():
    loop_scan()
    scan_zero()
    scripted()


if __name__ == "__main__":
    main()
