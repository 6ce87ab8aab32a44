"""cldl: run ONNX models on any OpenCL device, with onnxruntime's Python API.

    import cldl as ort                      # instead of: import onnxruntime as ort
    sess = ort.InferenceSession("model.onnx")
    outputs = sess.run(None, {"input": x})

InferenceSession takes the model as a path or as bytes and runs it on one OpenCL device, chosen by the
CLI's device spec (`device="gpu:0"` or `provider_options=[{"device": "cpu"}]`; without one: CLDL_DEVICE,
else GPU > accelerator > CPU). onnxruntime's provider names are accepted and mean that default device.
Inputs may take any shape the model allows, per call: each new input-shape signature is planned once and
cached (LRU). Errors raise cldl.Error (a RuntimeError) carrying cldl's message.

Training (cldl train's engine, docs/training.md): cldl.Trainer(path, loss=..., optimizer=..., lr=..., batch=...,
devices=...) with step(x, y), epoch(x, y), weights() and save(path); cldl.train(path, x, y, epochs=...) runs
epochs with one and returns their results.
"""
import os as _os
import struct as _struct
import threading as _threading

import numpy as _np

from ._cldl import Error, Model as _Model, TensorInfo, Trainer, devices, default_device as _default_device

try:
    from ._cldl import __version__
except ImportError:  # a module built without the version define
    __version__ = "0"

__all__ = [
    "InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "NodeArg",
    "ModelMetadata", "Error", "get_available_providers", "get_device", "devices", "load", "Trainer", "train",
]

PROVIDER = "CLDLExecutionProvider"

# cldl's dtype names (numpy's) -> onnxruntime's type strings.
_ORT_TYPES = {
    "float32": "tensor(float)", "float16": "tensor(float16)", "float64": "tensor(double)",
    "int8": "tensor(int8)", "int16": "tensor(int16)", "int32": "tensor(int32)", "int64": "tensor(int64)",
    "uint8": "tensor(uint8)", "uint16": "tensor(uint16)", "uint32": "tensor(uint32)", "uint64": "tensor(uint64)",
    "bool": "tensor(bool)",
}


class GraphOptimizationLevel:
    """onnxruntime's levels, accepted for compatibility: cldl always runs its own passes."""
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode:
    """onnxruntime's modes, accepted for compatibility: cldl overlaps independent branches on its own."""
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """onnxruntime's session options. cldl reads none of the thread or optimization settings (the
    OpenCL device decides); they are kept so code that sets them runs unchanged."""

    def __init__(self):
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.enable_profiling = False
        self.optimized_model_filepath = ""
        self._config = {}

    def add_session_config_entry(self, key, value):
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key):
        return self._config[key]


class RunOptions:
    """onnxruntime's run options, accepted for compatibility (cldl reads none of them)."""

    def __init__(self):
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False


class NodeArg:
    """An input or output as onnxruntime describes it: name, shape (ints; the symbol's name, or None,
    where a dim is symbolic) and type ('tensor(float)', ...)."""

    def __init__(self, name, shape, type):
        self.name = name
        self.shape = shape
        self.type = type

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class ModelMetadata:
    """The model file's metadata, as onnxruntime's get_modelmeta() gives it."""

    def __init__(self, **fields):
        self.producer_name = fields.get("producer_name", "")
        self.graph_name = fields.get("graph_name", "")
        self.graph_description = fields.get("graph_description", "")
        self.domain = fields.get("domain", "")
        self.description = fields.get("description", "")
        self.version = fields.get("version", 0)
        self.custom_metadata_map = fields.get("custom_metadata_map", {})

    def __repr__(self):
        return "ModelMetadata(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"


def get_available_providers():
    """The one provider cldl has; any onnxruntime provider name passed to InferenceSession means it too."""
    return [PROVIDER]


def get_device():
    """The default device's type as onnxruntime names it ('GPU', 'CPU' or 'ACCELERATOR'); cldl.devices()
    lists every device."""
    return _default_device()["type"].upper()


def _node_arg(info):
    shape = []
    for dim, sym in zip(info.shape, info.symbols):
        shape.append(dim if dim is not None else (sym if sym not in (None, "?") else None))
    t = _ORT_TYPES.get(info.dtype.name, f"tensor({info.dtype.name})")
    if info.kind in ("sequence", "optional_sequence"):
        t, shape = f"seq({t})", None  # onnxruntime gives a sequence no shape
    if info.kind.startswith("optional"):
        t = f"optional({t})"
    return NodeArg(info.name, shape, t)


def _device_from(device, providers, provider_options):
    """The device spec from device=, else a provider option 'device', else "" (the default device)."""
    options = []
    for i, p in enumerate(providers or []):
        if isinstance(p, (tuple, list)):
            name, opts = p[0], dict(p[1])
        else:
            name, opts = p, {}
        if provider_options and i < len(provider_options):
            opts.update(provider_options[i] or {})
        if not isinstance(name, str) or not (name == PROVIDER or name.endswith("ExecutionProvider")):
            raise Error(f"InferenceSession: unknown provider {name!r} (cldl takes {PROVIDER!r}; onnxruntime's "
                        "provider names mean the default device)")
        options.append(opts)
    if provider_options and not providers:
        options = [dict(o or {}) for o in provider_options]
    if device is None:
        for opts in options:
            if "device" in opts:
                device = str(opts["device"])
                break
    return device or ""


class InferenceSession:
    """Runs an ONNX model, as onnxruntime.InferenceSession does.

    path_or_bytes: the .onnx file's path, or its bytes (external data then resolves from the working
    folder). providers / provider_options: onnxruntime's, accepted; a provider option 'device' picks the
    device. device: a spec as the CLI's --device ('gpu', 'cpu', 'gpu:1', 'P:D', a name substring) and wins
    over the provider options. cldl-only keywords: dims ({symbol: value}) plans that signature at load,
    queues (in-order queues per device; 0, the default: one on a CPU device, two on others)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, *, device=None,
                 dims=None, queues=0, **kwargs):
        # onnxruntime's own keywords change its graph optimizer, which cldl does not have; others are typos.
        unknown = sorted(set(kwargs) - {"disabled_optimizers", "read_config_from_model"})
        if unknown:
            raise TypeError(f"InferenceSession: unexpected keyword arguments {unknown}")
        if isinstance(path_or_bytes, _os.PathLike):
            path_or_bytes = _os.fspath(path_or_bytes)
        if not isinstance(path_or_bytes, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"InferenceSession: path_or_bytes must be a path or bytes, got {type(path_or_bytes).__name__}")
        if isinstance(path_or_bytes, (bytearray, memoryview)):
            path_or_bytes = bytes(path_or_bytes)
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        spec = _device_from(device, providers, provider_options)
        self._model = _Model(path_or_bytes, spec or None, dict(dims or {}), queues)
        self._provider_options = {PROVIDER: {"device": spec or "", "device_name": self._model.device}}
        self._inputs = [_node_arg(i) for i in self._model.inputs]
        self._outputs = [_node_arg(o) for o in self._model.outputs]
        self._input_dtypes = {i.name: i.dtype for i in self._model.inputs}
        self._input_kinds = {i.name: i.kind for i in self._model.inputs}
        self._meta = _read_model_meta(path_or_bytes, self._model.graph_name, self._model.metadata)
        # onnxruntime's sessions may run from several threads at once; cldl's session state (plans, device
        # buffers) is per session, so calls take turns (each still releases the GIL while it runs).
        self._lock = _threading.Lock()

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []  # cldl folds initializers into its plans; none can be fed at run time

    def get_modelmeta(self):
        return self._meta

    def get_providers(self):
        return [PROVIDER]

    def get_provider_options(self):
        return {k: dict(v) for k, v in self._provider_options.items()}

    def get_session_options(self):
        return self._sess_options

    @property
    def device(self):
        """The OpenCL device's name."""
        return self._model.device

    @property
    def plan_cache(self):
        """Plans cached per input-shape signature: plans, capacity, hits, misses, evictions, last_plan_ms."""
        return self._model.plan_cache

    def set_plan_cache(self, capacity):
        """Keeps at most `capacity` plans (LRU; at least 1)."""
        self._model.set_plan_cache(capacity)

    def run(self, output_names, input_feed=None, run_options=None):
        """Runs the model on input_feed ({name: array}); returns the outputs named (all, in the model's
        order, when None) as a list of numpy arrays in that order. As onnxruntime: a sequence input or
        output is a list of arrays, an absent optional is None. run(feed), with the dict alone, is
        run(None, feed). Any input shapes the graph allows: a new signature is planned on its first run."""
        if input_feed is None and isinstance(output_names, dict):
            output_names, input_feed = None, output_names
        if not isinstance(input_feed, dict):
            raise TypeError(f"run: input_feed must be a dict of name -> array, got {type(input_feed).__name__}")
        known = [o.name for o in self._outputs]
        names = known if not output_names else list(output_names)
        for n in names:
            if n not in known:
                raise Error(f"run: '{n}' is not an output of the model (it has: {', '.join(known)})")
        feeds = {}
        for name, value in input_feed.items():
            kind = self._input_kinds.get(name, "tensor")
            if kind in ("sequence", "optional_sequence") and isinstance(value, (list, tuple)):
                value = [_np.asarray(v, dtype=self._input_dtypes[name]) for v in value]  # a sequence: a list
            elif value is None and kind.startswith("optional"):
                pass  # an absent optional
            elif not isinstance(value, _np.ndarray) and name in self._input_dtypes:
                value = _np.asarray(value, dtype=self._input_dtypes[name])  # lists, scalars: as onnxruntime
            feeds[name] = value
        with self._lock:
            out = self._model.run(feeds)
        return [out[n] for n in names]

    def bench(self, input_feed=None, warmup=3, iters=20):
        """Times run() host to host (uploads, the model, downloads) in milliseconds; random inputs when
        none are given (symbolic dims 1)."""
        with self._lock:
            return self._model.bench(input_feed, warmup, iters)


def load(path_or_bytes, device=None, dims=None, queues=0):
    """Shorthand for InferenceSession(path_or_bytes, device=device, dims=dims, queues=queues)."""
    return InferenceSession(path_or_bytes, device=device, dims=dims, queues=queues)


def train(model, x, y, epochs=1, out=None, **options):
    """Trains `model` (an ONNX file) for `epochs` passes over x, y with a Trainer(model, **options); writes the
    trained model to `out` when given. Returns the epochs' results ({'losses', 'mean_loss', 'seconds'} each)."""
    if epochs < 1:
        raise Error("train: epochs must be at least 1, got {}".format(epochs))
    if options.get("schedule") == "cosine" and not options.get("total_steps"):  # as cldl train: every epoch's steps
        batch, axis = options.get("batch", 32), options.get("batch_axis", 0)
        options["total_steps"] = epochs * -(-_np.asarray(x).shape[axis] // batch)
    t = Trainer(model, **options)
    history = [t.epoch(x, y) for _ in range(epochs)]
    if out is not None:
        t.save(out)
    return history


# ---- get_modelmeta: the ModelProto's header fields, read from the protobuf wire format (cldl's importer
# keeps only the graph and metadata_props; this reads the rest without the onnx package).

def _varint(buf, i):
    r = shift = 0
    while True:
        b = buf[i]
        i += 1
        r |= (b & 0x7F) << shift
        if b < 0x80:
            return r, i
        shift += 7


def _fields(buf, i, n):
    """(field number, wire type, value) of each field in buf[i:n]: ints for varints and fixed-width fields,
    (start, end) offsets for length-delimited ones (nothing is copied: buf may be a large mmap)."""
    while i < n:
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            ln, i = _varint(buf, i)
            v, i = (i, i + ln), i + ln
        elif wt == 1:
            v, i = _struct.unpack_from("<q", buf, i)[0], i + 8
        elif wt == 5:
            v, i = _struct.unpack_from("<i", buf, i)[0], i + 4
        else:
            return
        yield num, wt, v


def _read_model_meta(path_or_bytes, graph_name, metadata):
    f = dict(graph_name=graph_name, custom_metadata_map=dict(metadata))
    try:
        if isinstance(path_or_bytes, str):
            import mmap
            with open(path_or_bytes, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                _parse_model_meta(mm, f)
        else:
            _parse_model_meta(bytes(path_or_bytes), f)
    except (OSError, ValueError, IndexError, _struct.error):
        pass  # the importer read the file; only the header's descriptive fields are missing then
    return ModelMetadata(**f)


def _parse_model_meta(buf, f):
    text = {2: "producer_name", 4: "domain", 6: "description"}
    for num, wt, v in _fields(buf, 0, len(buf)):
        if num in text and wt == 2:
            f[text[num]] = buf[v[0]:v[1]].decode("utf-8", "replace")
        elif num == 5 and wt == 0:
            f["version"] = v
        elif num == 7 and wt == 2:  # GraphProto: doc_string is field 10
            for gnum, gwt, gv in _fields(buf, v[0], v[1]):
                if gnum == 10 and gwt == 2:
                    f["graph_description"] = buf[gv[0]:gv[1]].decode("utf-8", "replace")
