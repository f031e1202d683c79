"""A LEXICAL baseline in the detector's format, for benchmarks only: not a trained model, never for scoring.

An answer token is "not supported" (P = 0.88) unless the same token id occurs in the first segment (question
and passages), else P = 0.12. The rule is written as an ONNX graph (the runtime's very inputs and output),
with a WordPiece tokenizer trained here on the RAGTruth train answers and passages, so that
``detector_windows.py`` can measure how windows combine with a model whose behaviour is known: a token this
baseline finds in *some* window is in the context, which is exactly what ``min`` over windows keeps.
Needs ``onnx`` and ``tokenizers``.

    python benchmarks/detector/_lexical_detector.py DIR [--max-length 512] [--data TRAIN.jsonl]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[3] / "shared/data/ragtruth_qa_train.jsonl"


def _tokenizer(out: Path, data: Path) -> int:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    texts: list[str] = []
    for line in data.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        texts += [row["question"], row["answer"], *row["contexts"]]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=8000, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.save(str(out / "tokenizer.json"))
    return int(sep)


def _graph(sep: int) -> Any:
    from onnx import TensorProto, helper

    i64, f32 = TensorProto.INT64, TensorProto.FLOAT

    def const(name: str, value: Any, kind: int = i64, dims: list[int] | None = None) -> Any:
        values = value if isinstance(value, list) else [value]
        tensor = helper.make_tensor(name, kind, dims if dims is not None else [], values)
        return helper.make_node("Constant", [], [name], value=tensor)

    node = helper.make_node
    nodes = [
        const("sep", sep),
        const("ax1", [1], dims=[1]),
        const("ax2", [2], dims=[1]),
        const("one", 1),
        const("zero", 0),
        const("half", 0.5, f32),
        const("scale", 2.0, f32),
        # The first segment: every position before the first [SEP].
        node("Equal", ["input_ids", "sep"], ["is_sep"]),
        node("Cast", ["is_sep"], ["is_sep_i"], to=i64),
        node("CumSum", ["is_sep_i", "one"], ["segment"]),
        node("Equal", ["segment", "zero"], ["first"]),
        # Supported: the token's id occurs at some position of the first segment.
        node("Unsqueeze", ["input_ids", "ax2"], ["ids_col"]),
        node("Unsqueeze", ["input_ids", "ax1"], ["ids_row"]),
        node("Equal", ["ids_col", "ids_row"], ["same"]),
        node("Unsqueeze", ["first", "ax1"], ["first_row"]),
        node("And", ["same", "first_row"], ["hit"]),
        node("Cast", ["hit"], ["hit_f"], to=f32),
        node("ReduceMax", ["hit_f", "ax2"], ["supported"], keepdims=0),
        node("Sub", ["half", "supported"], ["d"]),
        node("Mul", ["d", "scale"], ["l1"]),
        node("Neg", ["l1"], ["l0"]),
        node("Unsqueeze", ["l0", "ax2"], ["l0u"]),
        node("Unsqueeze", ["l1", "ax2"], ["l1u"]),
        node("Concat", ["l0u", "l1u"], ["logits"], axis=2),
    ]
    inputs = [helper.make_tensor_value_info(n, i64, ["b", "t"]) for n in ("input_ids", "attention_mask")]
    output = helper.make_tensor_value_info("logits", f32, ["b", "t", 2])
    graph = helper.make_graph(nodes, "lexical", inputs, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def main() -> int:
    import onnx

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--data", type=Path, default=DATA, help=f"RAGTruth train rows (default {DATA})")
    args = p.parse_args()
    out, max_length = args.out, args.max_length
    out.mkdir(parents=True, exist_ok=True)
    model = _graph(_tokenizer(out, args.data))
    onnx.checker.check_model(model)
    onnx.save(model, str(out / "model.onnx"))
    files = {n: hashlib.sha256((out / n).read_bytes()).hexdigest() for n in ("model.onnx", "tokenizer.json")}
    meta = {"name": "LEXICAL baseline (not trained)", "max_length": max_length, "files": files}
    (out / "detector.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
