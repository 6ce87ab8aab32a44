"""Shared set-up of the Python tests (pytest; ctest runs them, tests/capi/CMakeLists.txt): where the models
are, which device, and the optional peers (onnxruntime, onnx from PyPI) that some tests compare with."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO = os.path.join(ROOT, "models", "zoo")
# The models tests/capi/make_models.cpp writes (ctest sets CLDL_TEST_MODELS).
MODELS = os.environ.get("CLDL_TEST_MODELS", "")
# The suite's device (ctest sets CLDL_DEVICE: cpu, or accelerator on Intel's FPGA emulator).
DEVICE = os.environ.get("CLDL_DEVICE") or "cpu"


@pytest.fixture
def mlp_path():
    p = os.path.join(MODELS, "mlp.onnx")
    if not os.path.exists(p):
        pytest.skip("CLDL_TEST_MODELS does not hold mlp.onnx (ctest's fixture capi_models writes it)")
    return p
