#!/usr/bin/python3
"""Exports a set of models from the wild with Debian's python3-torch / python3-torchvision (random
weights, nothing downloaded): torchvision classifiers, segmenters and detectors, at several opsets, with
a dynamic batch dim. BatchNorm statistics come from a few random batches and a zero-initialised
classifier gets random weights, so outputs compared with a peer's carry signal (--raw keeps the
constructors' initialisation). Each model is written as NAME_opsetN.onnx with NAME_opsetN.json beside it (the input
shape to bench with); a model torch cannot export at an opset is listed in FAILED.txt with the reason.

    /usr/bin/python3 tools/bench/export_models.py [--out DIR] [--opsets 11,13,17] [--only resnet18,...]

Then: tools/bench/models_vs_ort.py --models DIR (cldl against ONNX Runtime on the same inputs)."""
import argparse
import inspect
import json
import os
import traceback

import torch
import torchvision

# name -> (constructor, input shape [N, C, H, W]); batch is exported as a symbolic dim.
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(), (1, 3, 224, 224)),
    "resnet50": (lambda: torchvision.models.resnet50(), (1, 3, 224, 224)),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(), (1, 3, 224, 224)),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(), (1, 3, 224, 224)),
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(), (1, 3, 224, 224)),
    "shufflenet_v2_x1_0": (lambda: torchvision.models.shufflenet_v2_x1_0(), (1, 3, 224, 224)),
    "squeezenet1_1": (lambda: torchvision.models.squeezenet1_1(), (1, 3, 224, 224)),
    "densenet121": (lambda: torchvision.models.densenet121(), (1, 3, 224, 224)),
    "googlenet": (lambda: torchvision.models.googlenet(aux_logits=False, init_weights=True), (1, 3, 224, 224)),
    "inception_v3": (lambda: torchvision.models.inception_v3(aux_logits=False, init_weights=True), (1, 3, 299, 299)),
    "regnet_y_400mf": (lambda: torchvision.models.regnet_y_400mf(), (1, 3, 224, 224)),
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(), (1, 3, 224, 224)),
    "vit_b_16": (lambda: torchvision.models.vit_b_16(), (1, 3, 224, 224)),
    "deeplabv3_mobilenet_v3_large": (
        lambda: torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(weights_backbone=None, aux_loss=False),
        (1, 3, 256, 256)),
    "fcn_resnet50": (lambda: torchvision.models.segmentation.fcn_resnet50(weights_backbone=None, aux_loss=False),
                     (1, 3, 256, 256)),
    "ssdlite320_mobilenet_v3_large": (
        lambda: torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights_backbone=None), (1, 3, 320, 320)),
    # Two-stage and anchor-based detectors: TopK, NonMaxSuppression per class, RoiAlign (MultiScaleRoIAlign),
    # shapes decided by data throughout. Their transforms resize to 320 so a CPU run stays short; with random
    # weights no Faster R-CNN or RetinaNet box passes the default score threshold, so they keep every box (0.0).
    "fasterrcnn_mobilenet_v3_large_320_fpn": (
        lambda: torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights_backbone=None, box_score_thresh=0.0),
        (1, 3, 320, 320)),
    "retinanet_resnet50_fpn": (
        lambda: torchvision.models.detection.retinanet_resnet50_fpn(weights_backbone=None, min_size=320, max_size=320,
                                                                   score_thresh=0.0),
        (1, 3, 320, 320)),
}

DETECTORS = ("ssdlite", "fasterrcnn", "retinanet")
# torch 2.9+ exports through dynamo by default; the TorchScript exporter (Debian's torch 1.13 has only it) keeps
# the graphs of every torch version alike.
LEGACY_EXPORT = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}


class Plain(torch.nn.Module):
    """Segmentation models return a dict; the export wants tensors."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        y = self.m(x)
        return y["out"] if isinstance(y, dict) else y


def calibrate(model, shape, detection):
    """Random weights with the default BatchNorm statistics shrink activations layer by layer (SSDlite's
    last features are about 1e-13, every score the same), and torchvision zero-initialises ViT's
    classifier: outputs compared with a peer's would then agree trivially. So the BatchNorm statistics
    are set from a few random batches (as training would) and a zero classifier gets random weights."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns:
        net = model.backbone if detection else model
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # a cumulative average over the batches below
        net.train()
        with torch.no_grad():
            for _ in range(3):
                x = torch.randn(2, *shape[1:])
                net(model.transform([x[0], x[1]])[0].tensors if detection else x)
        model.eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and not m.weight.any():
                torch.nn.init.normal_(m.weight, std=0.02)


def export(name, opset, out_dir, calibrated=True):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    detection = name.startswith(DETECTORS)
    if calibrated:
        calibrate(model, shape, detection)
    path = os.path.join(out_dir, f"{name}_opset{opset}.onnx")
    x = torch.randn(*shape)
    if detection:  # takes a list of images; the batch is that list
        args, names = ([x[0]],), ["boxes", "scores", "labels"]
        axes, spec = {"image": {1: "height", 2: "width"}}, {"image": list(shape[1:])}
    else:
        model, args, names = Plain(model), (x,), ["y"]
        axes, spec = {"image": {0: "batch"}, "y": {0: "batch"}}, {"image": list(shape)}
    try:
        torch.onnx.export(model, args, path, opset_version=opset, input_names=["image"], output_names=names,
                          dynamic_axes=axes, **LEGACY_EXPORT)
    except Exception:  # noqa: BLE001 - a torch whose TorchScript exporter is gone: its default exporter
        if not LEGACY_EXPORT:
            raise
        torch.onnx.export(model, args, path, opset_version=opset, input_names=["image"], output_names=names,
                          dynamic_axes=axes)
    with open(path[:-5] + ".json", "w") as f:
        json.dump({"inputs": {k: ["float32", v] for k, v in spec.items()}}, f)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/cldl-models")
    ap.add_argument("--opsets", default="11,13,17")
    ap.add_argument("--only", default="")
    ap.add_argument("--raw", action="store_true",
                    help="keep the constructors' initialisation (no BatchNorm statistics, zero ViT head)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    names = a.only.split(",") if a.only else list(MODELS)
    failed = []
    for name in names:
        for opset in [int(o) for o in a.opsets.split(",")]:
            try:
                print("exported", export(name, opset, a.out, not a.raw), flush=True)
            except Exception as e:  # noqa: BLE001 - the reason is the result
                reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                failed.append(f"{name} opset {opset}: {reason}")
                print("FAILED", failed[-1], flush=True)
                traceback.print_exc(limit=1)
    with open(os.path.join(a.out, "FAILED.txt"), "w") as f:
        f.write("".join(l + "\n" for l in failed))


if __name__ == "__main__":
    main()
