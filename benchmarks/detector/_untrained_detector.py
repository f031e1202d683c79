"""An UNTRAINED base-sized detector, for timing only: all-mpnet-base-v2 with a fresh 2-class token head.

Its probabilities are noise (the head was never trained): it exists so that ``detector_latency.py`` can time
what a real detector of this size costs per window on this CPU before any trained model exists. Never point
``scoring.detector_model`` at it for scoring. Needs torch and transformers (the training venv, see
``training/``), and the base encoder directory (``config.json``, ``model.safetensors``, ``tokenizer.json``).

    python benchmarks/detector/_untrained_detector.py \\
        --base ~/.cache/faithtrace/base/all-mpnet-base-v2 --out DIR
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

# The input contract, read from its file: the training venv has torch but not faithtrace's dependencies.
_INPUTS = Path(__file__).resolve().parents[2] / "src/faithtrace/judge/detector/inputs.py"
_spec = importlib.util.spec_from_file_location("_detector_inputs", _INPUTS)
assert _spec is not None
assert _spec.loader is not None
_inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_inputs)
INPUT_NAMES, OUTPUT_NAME = _inputs.INPUT_NAMES, _inputs.OUTPUT_NAME


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModelForTokenClassification

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--max-length", type=int, default=512)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(str(args.base), num_labels=2).eval()
    ids = torch.ones((1, 16), dtype=torch.long)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).logits

    fp32 = args.out / "model-fp32.onnx"
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}}
    torch.onnx.export(
        Logits(),
        (ids, torch.ones_like(ids)),
        str(fp32),
        input_names=list(INPUT_NAMES),
        output_names=[OUTPUT_NAME],
        dynamic_axes={**axes, OUTPUT_NAME: {0: "batch", 1: "tokens"}},
        opset_version=17,
        dynamo=False,
    )
    quantize_dynamic(str(fp32), str(args.out / "model.onnx"), weight_type=QuantType.QInt8)
    fp32.unlink()
    shutil.copy(args.base / "tokenizer.json", args.out / "tokenizer.json")
    meta = {
        "name": "UNTRAINED mpnet-base int8 (timing only)",
        "untrained": True,
        "max_length": args.max_length,
        "files": {n: _sha256(args.out / n) for n in ("model.onnx", "tokenizer.json")},
    }
    (args.out / "detector.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {args.out} ({(args.out / 'model.onnx').stat().st_size / 1e6:.0f} MB int8)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
