#!/usr/bin/python3
"""ctest python_wheel: `pip wheel .` in a fresh venv, the wheel installed there, and tests/python run on the
installed package from another folder (no PYTHONPATH, no LD_LIBRARY_PATH: the wheel carries libcldl).

Bounded time: the wheel is built against this build tree's libcldl, installed into a prefix
(--config-settings=cmake.define.CLDL_PYTHON_PREBUILT=<prefix>), so only the binding compiles (about a minute on 2 cores)
instead of the whole library (about 15). A plain `pip install .` builds everything.

The venv sees Debian's numpy and pytest (--system-site-packages; PyPI's where those lack them);
scikit-build-core and pybind11 (the build requirements) and onnxruntime and onnx (the peers of
test_onnxruntime.py) come from PyPI. Exit 77 (ctest: skipped) with the reason when PyPI cannot be
reached or the venv cannot be made.

    build_wheel.py --source <checkout> --build <build dir> --work <scratch folder>
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
import zipfile

SKIP = 77


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    t0 = time.time()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    venv, prefix, dist = (os.path.join(a.work, n) for n in ("venv", "prefix", "dist"))

    if run([sys.executable, "-m", "venv", "--system-site-packages", venv]).returncode != 0:
        print(f"SKIPPED: `{sys.executable} -m venv` failed (apt-get install python3-venv)")
        return SKIP
    py = os.path.join(venv, "bin", "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check", "--timeout", "30", "--retries", "1"]
    if run(pip + ["install", "-q", "scikit-build-core>=0.8", "pybind11>=2.10"]).returncode != 0:
        print("SKIPPED: the build requirements (scikit-build-core, pybind11) could not be fetched from PyPI")
        return SKIP
    if run([py, "-c", "import pytest"], stderr=subprocess.DEVNULL).returncode != 0 and \
            run(pip + ["install", "-q", "pytest"]).returncode != 0:
        print("SKIPPED: pytest is neither in the system's site-packages (python3-pytest) nor fetchable from PyPI")
        return SKIP
    peers = run(pip + ["install", "-q", "onnxruntime", "onnx"]).returncode == 0
    if not peers:
        print("note: onnxruntime / onnx could not be fetched; test_onnxruntime.py will skip, saying so")

    if run(["cmake", "--install", a.build, "--prefix", prefix], stdout=subprocess.DEVNULL).returncode != 0:
        print("FAILED: cmake --install of the build tree")
        return 1
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    env.pop("PYTHONPATH", None)
    if run(pip + ["wheel", "--no-build-isolation", "--no-deps", "-w", dist, a.source,
                  f"--config-settings=cmake.define.CLDL_PYTHON_PREBUILT={prefix}",
                  f"--config-settings=build-dir={os.path.join(a.work, 'skbuild')}"], env=env).returncode != 0:
        print("FAILED: pip wheel")
        return 1
    wheels = glob.glob(os.path.join(dist, "cldl-*.whl"))
    if len(wheels) != 1:
        print(f"FAILED: expected one cldl wheel in {dist}, found {wheels}")
        return 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    print("wheel:", os.path.basename(wheels[0]), sorted(names))
    for want in ("cldl/__init__.py", "cldl/_cldl", "cldl/libcldl.so"):
        if not any(n.startswith(want) for n in names):
            print(f"FAILED: the wheel lacks {want}*")
            return 1
    if run(pip + ["install", "-q", "--no-deps", "--force-reinstall", wheels[0]]).returncode != 0:
        print("FAILED: pip install of the wheel")
        return 1

    # From a folder outside the checkout and the build tree: the installed package, nothing else.
    elsewhere = os.path.join(a.work, "elsewhere")
    os.makedirs(elsewhere)
    env.pop("LD_LIBRARY_PATH", None)
    where = run([py, "-c", "import cldl; print(cldl.__file__)"], cwd=elsewhere, env=env, capture_output=True, text=True)
    print(where.stdout, where.stderr)
    if where.returncode != 0 or not where.stdout.startswith(venv):
        print("FAILED: `import cldl` in the venv did not load the installed package")
        return 1
    tests = os.path.join(a.source, "tests", "python")
    rc = run([py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--rootdir", tests, tests],
             cwd=elsewhere, env=env).returncode
    print(f"python_wheel: {time.time() - t0:.0f} s in all")
    return rc


if __name__ == "__main__":
    sys.exit(main())
