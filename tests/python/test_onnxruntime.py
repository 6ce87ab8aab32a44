"""cldl.InferenceSession against onnxruntime (from PyPI; these tests skip, saying so, where it is absent):
the model zoo, the small PyTorch exports of tests/data/dynamic (a BERT-style encoder at opsets 11 and 14 and
a CNN, at random shapes), a set of small models made here with the onnx package (symbolic dims, several
shapes per session, output subsets and order, int64 / bool inputs and outputs, bytes, sequence and optional
values), the errors, and an unmodified
onnxruntime usage snippet run with only its import changed. Tolerances: fp32 models with GEMM / conv /
LSTM / attention, rtol = atol = 1e-4 (the zoo's logits are O(10)); element-wise models 1e-6; integer and
bool outputs exact."""
import os

import numpy as np
import pytest

import cldl
from conftest import DEVICE, ROOT, ZOO

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")


def both(model):
    """(cldl session, onnxruntime session) of a path or bytes."""
    return cldl.InferenceSession(model, device=DEVICE), ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def assert_same_io(a, b):
    for xa, xb in ((a.get_inputs(), b.get_inputs()), (a.get_outputs(), b.get_outputs())):
        assert [(v.name, v.type) for v in xa] == [(v.name, v.type) for v in xb]
    assert [v.shape for v in a.get_inputs()] == [v.shape for v in b.get_inputs()]


def assert_runs_alike(a, b, feeds, names=None, tol=1e-4):
    got, want = a.run(names, feeds), b.run(names, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(g, w)


# ---- the model zoo (models/zoo: PyTorch exports)

def zoo_model(name):
    p = os.path.join(ZOO, name, "model.onnx")
    if not os.path.exists(p):
        pytest.skip(f"{p} is not in this checkout")
    return p


def test_zoo_digits_cnn():
    a, b = both(zoo_model("digits_cnn"))
    assert_same_io(a, b)
    x = np.load(os.path.join(ZOO, "digits_cnn", "x_test.npy"))
    for n in (1, 7, len(x)):  # several batches through one session
        assert_runs_alike(a, b, {"image": x[:n]})


def test_zoo_char_lstm():
    a, b = both(zoo_model("char_lstm"))
    assert_same_io(a, b)
    rng = np.random.default_rng(1)
    hidden = np.load(os.path.join(os.path.dirname(zoo_model("char_lstm")), "ref_h_out.npy")).shape[-1]
    for batch, steps in ((1, 12), (3, 1), (2, 5)):
        feeds = {"tokens": rng.integers(0, 63, (batch, steps), dtype=np.int64),
                 "h_in": rng.standard_normal((2, batch, hidden)).astype(np.float32) * 0.1,
                 "c_in": rng.standard_normal((2, batch, hidden)).astype(np.float32) * 0.1}
        assert_runs_alike(a, b, feeds)
        assert_runs_alike(a, b, feeds, ["c_out", "logits"])  # a subset, in another order


def test_zoo_tiny_gpt():
    a, b = both(zoo_model("tiny_gpt"))
    assert [v.name for v in a.get_inputs()] == [v.name for v in b.get_inputs()]
    rng = np.random.default_rng(2)
    kv = {n: np.zeros((1, 128, 128), np.float32) for n in ("k0_in", "v0_in", "k1_in", "v1_in")}
    tokens = rng.integers(0, 60, (1, 9), dtype=np.int64)
    assert_runs_alike(a, b, dict(kv, tokens=tokens, pos=np.array([0], np.int64)))
    # A step with the cache the prompt filled, at position 9.
    prompt = b.run(None, dict(kv, tokens=tokens, pos=np.array([0], np.int64)))
    cache = dict(zip(("k0_in", "v0_in", "k1_in", "v1_in"), prompt[1:]))
    assert_runs_alike(a, b, dict(cache, tokens=tokens[:, :1], pos=np.array([9], np.int64)))


# ---- a model set made here

try:
    from onnx import TensorProto, helper
except ImportError:
    TensorProto = helper = None
needs_onnx = pytest.mark.skipif(helper is None, reason="onnx is not installed (pip install onnx): the model set is "
                                "made with it")


def make(nodes, inputs, outputs, initializers=(), opset=17, **props):
    g = helper.make_graph(nodes, "set", inputs, outputs, list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="cldl-tests", **props)
    m.ir_version = 8
    return m.SerializeToString()


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def attention_like():
    """x ['batch', 'seq', 8] -> softmax(x W) (symbolic dims), its row sums, and x + 1."""
    w = np.random.default_rng(3).standard_normal((8, 6)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Softmax", ["xw"], ["p"], axis=-1),
             helper.make_node("ReduceSum", ["p", "axes"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "one"], ["x1"])]
    inits = [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten()),
             helper.make_tensor("axes", TensorProto.INT64, [1], [2]), helper.make_tensor("one", TensorProto.FLOAT, [], [1])]
    return make(nodes, [vi("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                [vi("p", TensorProto.FLOAT, ["batch", "seq", 6]), vi("s", TensorProto.FLOAT, ["batch", "seq"]),
                 vi("x1", TensorProto.FLOAT, ["batch", "seq", 8])], inits)


def int_bool_model():
    """ids int64 [n], mask bool [n], table f32 [5, 3]: Gather rows, Where on the mask, int64 arithmetic,
    a bool output (Not) and a Cast."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
             helper.make_node("Unsqueeze", ["mask", "ax1"], ["mask2"]),
             helper.make_node("Where", ["mask2", "rows", "zero"], ["picked"]),
             helper.make_node("Mul", ["ids", "three"], ["ids3"]), helper.make_node("Not", ["mask"], ["nmask"]),
             helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT)]
    inits = [helper.make_tensor("ax1", TensorProto.INT64, [1], [1]), helper.make_tensor("zero", TensorProto.FLOAT, [], [0]),
             helper.make_tensor("three", TensorProto.INT64, [], [3])]
    return make(nodes, [vi("table", TensorProto.FLOAT, [5, 3]), vi("ids", TensorProto.INT64, ["n"]),
                        vi("mask", TensorProto.BOOL, ["n"])],
                [vi("picked", TensorProto.FLOAT, ["n", 3]), vi("ids3", TensorProto.INT64, ["n"]),
                 vi("nmask", TensorProto.BOOL, ["n"]), vi("maskf", TensorProto.FLOAT, ["n"])], inits)


@needs_onnx
def test_symbolic_dims_several_shapes_and_output_order():
    a, b = both(attention_like())
    assert_same_io(a, b)
    assert a.get_inputs()[0].shape == ["batch", "seq", 8]
    assert [o.shape for o in a.get_outputs()] == [o.shape for o in b.get_outputs()]
    rng = np.random.default_rng(4)
    for shape in ((1, 1, 8), (3, 7, 8), (2, 13, 8), (1, 1, 8)):
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        assert_runs_alike(a, b, feeds)
        assert_runs_alike(a, b, feeds, ["x1", "p"])
        assert_runs_alike(a, b, feeds, ["s"])
        assert_runs_alike(a, b, feeds, ["s", "s"])  # a name twice, as onnxruntime allows
    assert a.plan_cache["plans"] == 3


@needs_onnx
def test_int64_bool_inputs_and_outputs():
    a, b = both(int_bool_model())
    assert_same_io(a, b)
    assert [v.type for v in a.get_inputs()] == ["tensor(float)", "tensor(int64)", "tensor(bool)"]
    assert [v.type for v in a.get_outputs()] == ["tensor(float)", "tensor(int64)", "tensor(bool)", "tensor(float)"]
    table = np.arange(15, dtype=np.float32).reshape(5, 3) - 7
    for ids in ([4], [0, 3, 3, 1, 2, 4, 0]):
        ids = np.array(ids, np.int64)
        mask = np.arange(len(ids)) % 3 != 1
        assert_runs_alike(a, b, {"table": table, "ids": ids, "mask": mask}, tol=0)


@needs_onnx
def test_bytes_model_and_metadata():
    data = make([helper.make_node("Relu", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, ["n", None, 3])],
                [vi("y", TensorProto.FLOAT, ["n", None, 3])], doc_string="relu model", model_version=7, domain="dom")
    a, b = both(data)
    assert [i.shape for i in a.get_inputs()] == [i.shape for i in b.get_inputs()] == [["n", None, 3]]
    ma, mb = a.get_modelmeta(), b.get_modelmeta()
    for f in ("producer_name", "graph_name", "domain", "description", "version", "custom_metadata_map"):
        assert getattr(ma, f) == getattr(mb, f), f
    x = np.random.default_rng(5).standard_normal((2, 4, 3)).astype(np.float32)
    assert_runs_alike(a, b, {"x": x}, tol=0)


@needs_onnx
def test_errors_like_onnxruntime():
    a, b = both(attention_like())
    x = np.zeros((2, 3, 8), np.float32)
    cases = [({"nope": x}, r"'nope' is not an input"),
             ({"x": x.astype(np.int32)}, r"input 'x': expected f32 \[batch, seq, 8\], got i32"),
             ({"x": x[0]}, r"input 'x': expected rank 3"),
             ({"x": np.zeros((2, 3, 5), np.float32)}, r"input 'x' dimension 2: expected 8")]
    for feeds, msg in cases:
        with pytest.raises(Exception):  # onnxruntime refuses each too
            b.run(None, feeds)
        with pytest.raises(cldl.Error, match=msg):
            a.run(None, feeds)
    with pytest.raises(cldl.Error, match=r"'q' is not an output"):
        a.run(["q"], {"x": x})


# ---- onnxruntime's own usage, only the import changed

SNIPPET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_snippet.py")


def test_onnxruntime_snippet_with_only_the_import_changed():
    src = open(SNIPPET).read()
    assert "import onnxruntime as rt\n" in src
    x = np.load(os.path.join(ZOO, "digits_cnn", "x_test.npy"))[:20]
    results = {}
    for module in ("onnxruntime", "cldl"):
        env = {"MODEL": zoo_model("digits_cnn"), "X_test": x}
        exec(compile(src.replace("import onnxruntime as rt\n", f"import {module} as rt\n"), SNIPPET, "exec"), env)
        results[module] = env["pred_onx"]
    np.testing.assert_allclose(results["cldl"], results["onnxruntime"], rtol=1e-4, atol=1e-4)


def sequence_model():
    """xs: a sequence of float tensors, t: a tensor, opt: an optional tensor. Outputs: xs with t appended
    (a sequence), their concatenation along axis 0, whether opt came (OptionalHasElement)."""
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))
    nodes = [helper.make_node("SequenceInsert", ["xs", "t"], ["ys"]),
             helper.make_node("ConcatFromSequence", ["ys"], ["cat"], axis=0),
             helper.make_node("OptionalHasElement", ["opt"], ["has"])]
    inputs = [helper.make_value_info("xs", seq_t), vi("t", TensorProto.FLOAT, ["r", 3]),
              helper.make_value_info("opt", opt_t)]
    outputs = [helper.make_value_info("ys", seq_t), vi("cat", TensorProto.FLOAT, [None, 3]), vi("has", TensorProto.BOOL, [])]
    return make(nodes, inputs, outputs, opset=18)


@needs_onnx
def test_sequence_and_optional_inputs_and_outputs():
    a, b = both(sequence_model())
    assert [v.type for v in a.get_inputs()] == [v.type for v in b.get_inputs()]
    assert [v.type for v in a.get_outputs()] == [v.type for v in b.get_outputs()]
    rng = np.random.default_rng(6)
    for rows, with_opt in (((2, 1), True), ((4,), False), ((1, 3, 2), True)):
        xs = [rng.standard_normal((r, 3)).astype(np.float32) for r in rows]
        t = rng.standard_normal((2, 3)).astype(np.float32)
        feeds = {"xs": xs, "t": t, "opt": rng.standard_normal(3).astype(np.float32) if with_opt else None}
        got, want = a.run(None, feeds), b.run(None, feeds)
        assert isinstance(got[0], list) and len(got[0]) == len(want[0]) == len(rows) + 1
        for g, w in zip(got[0], want[0]):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(got[1], want[1])
        assert bool(got[2]) == bool(want[2]) == with_opt


# ---- the small members of the model set (tests/data/dynamic: PyTorch exports with dynamic dims)

def dynamic_model(name):
    p = os.path.join(ROOT, "tests", "data", "dynamic", name + ".onnx")
    if not os.path.exists(p):
        pytest.skip(f"{p} is not in this checkout")
    return p


@pytest.mark.parametrize("name", ["bert_opset11", "bert_opset14"])
def test_bert_style_encoder_at_random_shapes(name):
    """A BERT-style encoder (Hugging Face layout, vocab 100, 64 positions) with dynamic batch and sequence:
    one session, eight random shapes, padded attention masks."""
    a, b = both(dynamic_model(name))
    assert_same_io(a, b)
    rng = np.random.default_rng(7)
    for _ in range(8):
        batch, seq = int(rng.integers(1, 5)), int(rng.integers(1, 65))
        ids = rng.integers(0, 100, (batch, seq)).astype(np.int64)
        mask = (np.arange(seq)[None, :] < rng.integers(1, seq + 1, (batch, 1))).astype(np.int64)
        assert_runs_alike(a, b, {"input_ids": ids, "attention_mask": mask})


def test_cnn_with_dynamic_image_size():
    a, b = both(dynamic_model("cnn"))
    assert_same_io(a, b)
    rng = np.random.default_rng(8)
    for shape in ((1, 3, 32, 32), (2, 3, 17, 45), (1, 3, 64, 23)):
        assert_runs_alike(a, b, {"image": rng.standard_normal(shape).astype(np.float32)})
