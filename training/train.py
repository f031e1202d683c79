"""Train, validate, export and check the detector: one run from the RAGTruth-QA file to a model folder.

    python -m training.train --base DIR --out DIR [--tiny] [...]   (training/run.sh wraps it)

Steps: grouped splits and token labels (``training.prep``), synthetic contradictions and rewordings for the
training part (``training.synth``), AdamW with linear warm-up and decay (bf16 autocast on a GPU, fp32 on a
CPU), the epoch with the best validation AUROC of the answer's highest token probability kept, ONNX export
(opset 17), int8 dynamic quantisation, a check that both ONNX files reproduce the torch model's probabilities,
the figures of the shipped int8 file on each evaluation part, and ``detector.json`` plus ``MODEL_CARD.md``
beside the model. Needs torch, transformers, tokenizers, onnx and onnxruntime (training/requirements.txt); the
test suite does not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import string
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForTokenClassification

from training import cached, pack_base, prep, synth
from training._contract import inputs, metrics
from training.fetch_base import sha256_file

HALLUCINATED_LABEL: int = inputs.HALLUCINATED_LABEL
INPUT_NAMES: tuple[str, str] = inputs.INPUT_NAMES
OUTPUT_NAME: str = inputs.OUTPUT_NAME

FORMAT_VERSION = 1
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "ragtruth_qa_train.jsonl"
# The context keeps at least this many tokens: an answer too long to leave room for them is skipped (counted),
# because training on an answer without its evidence teaches the model that everything is invented.
MIN_CONTEXT_TOKENS = 32
# The same pair with no padding must give the same probabilities through the fp32 ONNX graph as through torch;
# beyond float rounding (about 1e-5 here) something in the export is wrong.
FP32_TOLERANCE = 1e-3


@dataclass
class Encoded:
    example: prep.Example
    ids: list[int]
    labels: list[int]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def load_tokenizer(path: Path, max_length: int) -> Tokenizer:
    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length, strategy="only_first")
    return tok


def encode_all(
    tok: Tokenizer, examples: Sequence[prep.Example], max_length: int, skipped: Counter[str]
) -> list[Encoded]:
    out: list[Encoded] = []
    for ex in examples:
        answer_tokens = len(tok.encode(ex.answer, add_special_tokens=False).ids)
        # Four special tokens at most (<s> A </s></s> B </s>) around the pair.
        if answer_tokens + MIN_CONTEXT_TOKENS + 4 > max_length:
            skipped["answer_too_long"] += 1
            continue
        enc = tok.encode(ex.context, ex.answer)
        labels = prep.token_labels(enc.offsets, enc.sequence_ids, ex.spans)
        if not any(label != prep.IGNORE for label in labels):
            skipped["no_answer_tokens"] += 1
            continue
        out.append(Encoded(ex, list(enc.ids), labels))
    return out


def pad_batch(batch: Sequence[Encoded], pad_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    width = max(len(e.ids) for e in batch)
    ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    labels = np.full((len(batch), width), prep.IGNORE, dtype=np.int64)
    for row, e in enumerate(batch):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
        labels[row, : len(e.ids)] = e.labels
    return ids, mask, labels


ProbFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def token_probabilities(
    prob_fn: ProbFn, data: Sequence[Encoded], pad_id: int, batch: int
) -> list[np.ndarray]:
    """Each example's hallucination probability per answer token (labels != IGNORE), in input order."""
    # Similar lengths together: less padding, and the same result since attention masks out the pad tokens.
    order = sorted(range(len(data)), key=lambda i: len(data[i].ids))
    result: list[np.ndarray] = [np.empty(0)] * len(data)
    for start in range(0, len(order), batch):
        chunk = [data[i] for i in order[start : start + batch]]
        ids, mask, labels = pad_batch(chunk, pad_id)
        probs = prob_fn(ids, mask)
        for row, index in enumerate(order[start : start + batch]):
            result[index] = probs[row][labels[row] != prep.IGNORE]
    return result


def figures(data: Sequence[Encoded], probs: Sequence[np.ndarray], threshold: float = 0.5) -> dict[str, Any]:
    """Answer-level AUROC of the highest token probability, balanced accuracy at ``threshold``, token F1.

    A token is flagged when its probability reaches ``threshold``, as ``scoring.detector_threshold`` does."""
    if not data:
        return {"answers": 0}
    truth = [e.example.hallucinated for e in data]
    top = [float(p.max()) for p in probs]
    tp = fp = fn = 0
    for e, p in zip(data, probs, strict=True):
        gold = np.array([label for label in e.labels if label != prep.IGNORE]) == HALLUCINATED_LABEL
        pred = p >= threshold
        tp += int((gold & pred).sum())
        fp += int((~gold & pred).sum())
        fn += int((gold & ~pred).sum())
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")

    confusion = metrics.Confusion()
    for hallucinated, score in zip(truth, top, strict=True):
        confusion.add(hallucinated, score >= threshold)
    area = metrics.auroc(top, truth)
    ba = confusion.balanced_accuracy
    return {
        "answers": len(data),
        "hallucinated": sum(truth),
        "auroc": None if area is None else round(area, 4),
        "balanced_accuracy": None if ba is None else round(ba, 4),
        "token_f1": None if math.isnan(f1) else round(f1, 4),
        "threshold": threshold,
    }


def choose_threshold(data: Sequence[Encoded], probs: Sequence[np.ndarray]) -> float:
    """The answer-level threshold on the highest token probability with the best balanced accuracy on ``data``
    (an answer is flagged when its highest probability reaches the threshold)."""
    truth = [e.example.hallucinated for e in data]
    top = sorted({float(p.max()) for p in probs})
    best, best_ba = 0.5, -1.0
    for threshold in top:
        confusion = metrics.Confusion()
        for hallucinated, p in zip(truth, probs, strict=True):
            confusion.add(hallucinated, float(p.max()) >= threshold)
        ba = confusion.balanced_accuracy or 0.0
        if ba > best_ba:
            best, best_ba = threshold, ba
    return best


def write_scores(path: Path, parts: dict[str, list[Encoded]], probs: dict[str, list[np.ndarray]]) -> None:
    """One line per answer: its part, id, origin, label and highest token probability, for comparisons with
    other judges on the same rows (benchmarks)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for name, part in parts.items():
            for e, p in zip(part, probs[name], strict=True):
                row = {
                    "part": name,
                    "id": e.example.id,
                    "origin": e.example.origin,
                    "hallucinated": e.example.hallucinated,
                    "risk": float(p.max()),
                }
                f.write(json.dumps(row) + "\n")


def torch_prob_fn(model: torch.nn.Module, device: torch.device, bf16: bool) -> ProbFn:
    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(
                input_ids=torch.from_numpy(ids).to(device), attention_mask=torch.from_numpy(mask).to(device)
            ).logits
        return torch.softmax(logits.float(), dim=-1)[..., HALLUCINATED_LABEL].cpu().numpy()

    return run


def onnx_prob_fn(path: Path) -> ProbFn:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        (logits,) = session.run([OUTPUT_NAME], {INPUT_NAMES[0]: ids, INPUT_NAMES[1]: mask})
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return (shifted / shifted.sum(axis=-1, keepdims=True))[..., HALLUCINATED_LABEL]

    return run


class _LogitsOnly(torch.nn.Module):
    """The graph the runtime expects: two int64 inputs in, ``logits`` out (no token type ids, no dict)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # type: ignore[no-any-return]


def export_onnx(model: torch.nn.Module, samples: Sequence[Encoded], pad_id: int, path: Path) -> None:
    """Trace ``model`` into ``path`` with a padded batch of ``samples``.

    The tracing batch must hold padding: traced with an all-ones attention mask, the attention code may skip
    the mask altogether and the graph would then ignore ``attention_mask`` (the check below caught exactly
    that).
    """
    model = model.float().cpu().eval()
    ids, mask, _ = pad_batch(samples, pad_id)
    axes = {0: "batch", 1: "tokens"}
    # The wrapper in eval mode too: the exporter restores the top module's mode afterwards, recursively, and a
    # wrapper left in training mode would switch dropout back on in the model that is then compared.
    torch.onnx.export(
        _LogitsOnly(model).eval(),
        (torch.from_numpy(ids), torch.from_numpy(mask)),
        str(path),
        input_names=list(INPUT_NAMES),
        output_names=[OUTPUT_NAME],
        dynamic_axes={INPUT_NAMES[0]: axes, INPUT_NAMES[1]: axes, OUTPUT_NAME: axes},
        opset_version=17,
        # The TorchScript exporter: one self-contained file, and it handles these encoders' attention code.
        dynamo=False,
    )


def max_abs_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    if args.tiny:
        # Same architecture and tokenizer as the base, a few hundred thousand weights, random start: exercises
        # every step of the recipe (and gives the test suite a real model) in minutes on a CPU.
        config = AutoConfig.from_pretrained(args.base, num_labels=2)
        config.hidden_size = args.tiny_hidden
        config.num_hidden_layers = 2
        config.num_attention_heads = 2
        config.intermediate_size = args.tiny_hidden * 4
        torch.manual_seed(args.seed)
        return AutoModelForTokenClassification.from_config(config)
    return AutoModelForTokenClassification.from_pretrained(args.base, num_labels=2)


@dataclass
class Prepared:
    splits: prep.Splits
    train_rows: list[dict[str, Any]]
    synthetic: list[prep.Example]
    train_data: list[Encoded]
    eval_data: dict[str, list[Encoded]]
    skipped: Counter[str]
    pad_id: int


def prepare(args: argparse.Namespace) -> Prepared:
    """Rows → grouped splits → examples (+ synthetic) → token ids and labels; deterministic given the args."""
    skipped_rows: dict[str, int] = {}
    rows = prep.load_rows(args.data, skipped_rows)
    splits = prep.split_rows(
        rows,
        validation_fraction=args.validation_fraction,
        heldout_fraction=args.heldout_fraction,
        seed=args.seed,
    )
    splits.skipped = skipped_rows
    train_rows = list(splits.train)
    if args.max_train and len(train_rows) > args.max_train:
        train_rows = random.Random(f"subset:{args.seed}").sample(train_rows, args.max_train)
    parts_rows = {"validation": splits.validation, "heldout": splits.heldout, "dev": splits.dev}
    if args.max_eval:
        parts_rows = {k: v[: args.max_eval] for k, v in parts_rows.items()}
    synthetic = synth.generate(train_rows, ratio=args.synthetic_ratio, seed=args.seed)
    heldout_synthetic = synth.generate(parts_rows["heldout"], ratio=1.0, seed=args.seed + 1)
    tok = load_tokenizer(args.base / "tokenizer.json", args.max_length)
    pad_id = tok.token_to_id("<pad>")
    if pad_id is None:
        pad_id = tok.token_to_id("[PAD]") or 0
    skipped: Counter[str] = Counter()
    train_data = encode_all(tok, prep.examples_from_rows(train_rows) + synthetic, args.max_length, skipped)
    eval_data = {
        name: encode_all(tok, prep.examples_from_rows(part), args.max_length, skipped)
        for name, part in parts_rows.items()
    }
    eval_data["heldout_synthetic"] = encode_all(tok, heldout_synthetic, args.max_length, skipped)
    log(f"rows: {json.dumps(splits.summary())}")
    log(f"synthetic {len(synthetic)}: {dict(Counter(e.origin for e in synthetic))}")
    log(
        "encoded: train "
        + str(len(train_data))
        + ", "
        + ", ".join(f"{k} {len(v)}" for k, v in eval_data.items())
        + f"; skipped {dict(skipped)}"
    )
    return Prepared(splits, train_rows, synthetic, train_data, eval_data, skipped, pad_id)


def _numpy_state(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """A snapshot of the weights. Copied: on a CPU, ``.cpu().numpy()`` would share the parameters' memory, and
    the "best epoch" and the transfer's reference would then follow training instead of staying put."""
    return {
        k: (v.detach().float() if v.is_floating_point() else v.detach()).cpu().numpy().copy()
        for k, v in model.state_dict().items()
    }


def _load_numpy_state(model: torch.nn.Module, state: dict[str, np.ndarray]) -> None:
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()})


# Arguments that decide the data and the model's shape: the finishing step reuses the training run's values.
_DATA_ARGS = (
    "seed",
    "validation_fraction",
    "heldout_fraction",
    "max_train",
    "max_eval",
    "synthetic_ratio",
    "max_length",
    "tiny",
    "tiny_hidden",
)


class FullRoute:
    """Every weight trains, from the token ids: the GPU run (and the tiny model)."""

    def __init__(
        self, model: torch.nn.Module, data: Prepared, device: torch.device, args: argparse.Namespace
    ):
        self.model, self.data, self.device = model, data, device
        self.bf16 = device.type == "cuda"
        self.eval_batch = args.eval_batch

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.model.parameters())

    def loss(self, batch: Sequence[int], loss_fn: torch.nn.Module) -> torch.Tensor:
        ids, mask, labels = pad_batch([self.data.train_data[i] for i in batch], self.data.pad_id)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(
                input_ids=torch.from_numpy(ids).to(self.device),
                attention_mask=torch.from_numpy(mask).to(self.device),
            ).logits
        result: torch.Tensor = loss_fn(
            logits.float().view(-1, 2), torch.from_numpy(labels).to(self.device).view(-1)
        )
        return result

    def probabilities(self, part: str) -> list[np.ndarray]:
        self.model.eval()
        prob_fn = torch_prob_fn(self.model, self.device, self.bf16)
        return token_probabilities(prob_fn, self.data.eval_data[part], self.data.pad_id, self.eval_batch)


def _batches(train_data: Sequence[Encoded], batch: int, rng: random.Random) -> list[list[int]]:
    """One epoch's batches: similar lengths together within shuffled chunks (less padding), still a random mix
    across batches."""
    order = list(range(len(train_data)))
    rng.shuffle(order)
    chunk = batch * 32
    batches: list[list[int]] = []
    for c in range(0, len(order), chunk):
        block = sorted(order[c : c + chunk], key=lambda i: len(train_data[i].ids))
        batches.extend(block[b : b + batch] for b in range(0, len(block), batch))
    rng.shuffle(batches)
    return batches


# What a checkpoint must agree on with the run that resumes it.
_RESUME_ARGS = ("lr", "batch", "epochs", "warmup", "freeze_below", *_DATA_ARGS)


def _trainable(model: torch.nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if p.requires_grad]


def run_training(args: argparse.Namespace) -> None:
    started = time.monotonic()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    # The cached route is the CPU's: on a GPU the whole model trains in the time it takes to fill the cache.
    on_gpu = torch.cuda.is_available() and not args.cpu and not args.freeze_below
    device = torch.device("cuda" if on_gpu else "cpu")
    bf16 = device.type == "cuda"
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    log(f"device {device} ({'bf16 autocast' if bf16 else 'fp32'}), torch {torch.__version__}")
    data = prepare(args)
    train_data, eval_data = data.train_data, data.eval_data

    model = build_model(args)
    # The start every weight moved from: the base's weights are rebuilt from it at finishing time.
    reference = _numpy_state(model)
    model = model.to(device)
    cache_costs: dict[str, Any] = {}
    route: FullRoute | cached.CachedRoute
    if args.freeze_below:
        store = cached.store_for(args, {k: getattr(args, k) for k in _DATA_ARGS})
        cached.build_cache(args, data, model, store)
        cache_costs = store.costs()
        route = cached.CachedRoute(args, model, data, store)
    else:
        route = FullRoute(model, data, device, args)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {type(model).__name__}, {n_params / 1e6:.2f}M parameters")
    params = route.parameters()
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(train_data) / args.batch)
    total_steps = steps_per_epoch * args.epochs
    warmup = max(1, int(total_steps * args.warmup))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=prep.IGNORE)
    names = _trainable(model)
    best: dict[str, Any] = {"auroc": -1.0}
    history: list[dict[str, Any]] = []
    order_rng = random.Random(f"order:{args.seed}")
    first_epoch, skip_steps, trained_seconds = 1, 0, 0.0
    checkpoint = args.transfer / "checkpoint.pt"
    settings = {k: getattr(args, k) for k in _RESUME_ARGS}
    if args.resume and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        if saved["settings"] != settings:
            sys.exit(f"{checkpoint} was made with other settings: {saved['settings']}")
        model.load_state_dict({n: torch.from_numpy(v) for n, v in saved["weights"].items()}, strict=False)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["torch_rng"])
        order_rng.setstate(saved["order_rng"])
        first_epoch, skip_steps = saved["epoch"], saved["step"]
        history, trained_seconds = saved["history"], saved["trained_seconds"]
        best = saved["best"]
        if "state" in best:
            best["state"] = {**reference, **best["state"]}
        log(f"resumed from {checkpoint}: epoch {first_epoch}, {skip_steps} steps done")

    def save_checkpoint(epoch: int, step: int, epoch_rng: Any, seconds: float) -> None:
        """Everything a killed run needs to go on from ``step`` of ``epoch`` (written whole, then renamed)."""
        args.transfer.mkdir(parents=True, exist_ok=True)
        state = model.state_dict()
        doc = {
            "settings": settings,
            "weights": {n: state[n].detach().cpu().numpy().copy() for n in names},
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "order_rng": epoch_rng,
            "epoch": epoch,
            "step": step,
            "history": history,
            "trained_seconds": seconds,
            "best": {**best, "state": {n: best["state"][n] for n in names}} if "state" in best else best,
        }
        tmp = checkpoint.with_name(checkpoint.name + ".tmp")
        torch.save(doc, tmp)
        os.replace(tmp, checkpoint)

    for epoch in range(first_epoch, args.epochs + 1):
        model.train()
        epoch_start = time.monotonic()
        epoch_rng = order_rng.getstate()
        batches = _batches(train_data, args.batch, order_rng)
        running, last_save = 0.0, time.monotonic()
        for step, batch_index in enumerate(batches, 1):
            if step <= skip_steps:
                continue
            loss = route.loss(batch_index, loss_fn)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            running += loss.item()
            if step % args.log_every == 0:
                per = (time.monotonic() - epoch_start) / ((step - skip_steps) * args.batch)
                log(
                    f"epoch {epoch} step {step}/{len(batches)} loss {running / args.log_every:.4f} "
                    f"({per:.2f} s per example, load {os.getloadavg()[0]:.1f})"
                )
                running = 0.0
            if args.checkpoint_minutes and time.monotonic() - last_save > 60 * args.checkpoint_minutes:
                save_checkpoint(epoch, step, epoch_rng, trained_seconds + time.monotonic() - epoch_start)
                last_save = time.monotonic()
        seconds = time.monotonic() - epoch_start
        examples_run = len(train_data) - min(len(train_data), skip_steps * args.batch)
        skip_steps = 0
        trained_seconds += seconds
        val = figures(eval_data["validation"], route.probabilities("validation"))
        val["epoch"], val["train_seconds"] = epoch, round(seconds, 1)
        val["seconds_per_example"] = round(seconds / max(1, examples_run), 3)
        val["load_average_1m"] = round(os.getloadavg()[0], 1)
        history.append(val)
        log(f"epoch {epoch}: validation {json.dumps(val)}")
        if (val["auroc"] or 0.0) > best["auroc"]:
            best = {"auroc": val["auroc"] or 0.0, "epoch": epoch, "state": _numpy_state(model)}
        if args.checkpoint_minutes:
            save_checkpoint(epoch + 1, 0, order_rng.getstate(), trained_seconds)
    train_seconds = trained_seconds
    _load_numpy_state(model, best["state"])
    log(f"best epoch {best['epoch']} (validation AUROC {best['auroc']}); training took {train_seconds:.0f} s")
    torch_figures = {}
    for name in eval_data:
        torch_figures[name] = figures(eval_data[name], route.probabilities(name))
        log(f"torch ({'bf16' if bf16 else 'fp32'}) on {name}: {json.dumps(torch_figures[name])}")

    base_meta = _base_meta(args)
    summary = {
        "data": args.data.name,
        "data_sha256": sha256_file(args.data),
        "splits": data.splits.summary(),
        "train_answers_used": len(data.train_rows),
        "synthetic": dict(Counter(e.origin for e in data.synthetic)),
        "encoded_train_examples": len(train_data),
        "skipped_when_encoding": dict(data.skipped),
        "epochs": args.epochs,
        "best_epoch": best["epoch"],
        "lr": args.lr,
        "batch": args.batch,
        "warmup_fraction": args.warmup,
        "seed": args.seed,
        "device": str(device),
        "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "precision": "bf16 autocast" if bf16 else "fp32",
        "train_seconds": round(train_seconds, 1),
        "history": history,
        "torch_figures": torch_figures,
        "freeze_below": args.freeze_below or 0,
        "trained_parameters": sum(p.numel() for p in params),
        "cache": cache_costs,
    }
    extra = {
        "args": {k: getattr(args, k) for k in _DATA_ARGS},
        "architecture": type(model).__name__,
        "parameters": n_params,
        "base": base_meta,
        "training": summary,
    }
    # The full fine-tune's weights travel back from the GPU machine as 4-bit changes; the cached route's never
    # travel, so its trained tensors are kept exactly and the frozen ones named, not stored.
    exact = bool(args.freeze_below)
    transfer_reference = None if args.tiny and not exact else reference
    pack_base.save_transfer(best["state"], transfer_reference, args.transfer, extra, exact=exact)
    # What the finishing step will rebuild: measure it here, where the model is fast to run.
    rebuilt, _ = pack_base.load_transfer(args.transfer, transfer_reference)
    _load_numpy_state(model, rebuilt)
    after = figures(eval_data["validation"], route.probabilities("validation"))
    summary["validation_after_transfer"] = after
    manifest = json.loads((args.transfer / "transfer.json").read_text())
    manifest["training"] = summary
    manifest["total_seconds"] = round(time.monotonic() - started, 1)
    (args.transfer / "transfer.json").write_text(json.dumps(manifest, indent=1) + "\n")
    checkpoint.unlink(missing_ok=True)
    size = sum(p.stat().st_size for p in args.transfer.iterdir())
    log(
        f"validation of the weights as rebuilt from {args.transfer} ({size / 2**20:.1f} MiB): "
        f"{json.dumps(after)}"
    )
    log(f"training phase done in {time.monotonic() - started:.0f} s")


def _base_meta(args: argparse.Namespace) -> dict[str, Any]:
    path = args.base / "detector-base.json"
    if path.exists():
        meta: dict[str, Any] = json.loads(path.read_text())
        return meta
    weights = args.base / "model.safetensors"
    return {"name": args.base_name, "weights_sha256": sha256_file(weights) if weights.exists() else None}


def run_finish(args: argparse.Namespace) -> None:
    """Rebuild the trained model from the transfer folder; export, quantise, check, write the model folder."""
    started = time.monotonic()
    torch.set_num_threads(args.threads)
    manifest = json.loads((args.transfer / "transfer.json").read_text())
    for key, value in manifest["args"].items():
        setattr(args, key, value)
    data = prepare(args)
    eval_data, pad_id = data.eval_data, data.pad_id
    model = build_model(args)
    state, _ = pack_base.load_transfer(args.transfer, _numpy_state(model))
    _load_numpy_state(model, state)
    model = model.float().cpu().eval()

    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / ".work"
    work.mkdir(exist_ok=True)
    fp32_path, int8_path = work / "model.fp32.onnx", args.out / "model.onnx"
    longest = max(eval_data["validation"], key=lambda e: len(e.ids))
    # A second, shorter row guarantees padding in the traced batch (see export_onnx).
    shorter = Encoded(
        longest.example, longest.ids[: len(longest.ids) // 2], longest.labels[: len(longest.ids) // 2]
    )
    export_onnx(model, [longest, shorter], pad_id, fp32_path)
    quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True)
    model.eval()
    check_data = eval_data["validation"][: args.check_examples]
    reference_probs = token_probabilities(
        torch_prob_fn(model, torch.device("cpu"), False), check_data, pad_id, 8
    )
    fp32_diff = max_abs_diff(
        reference_probs, token_probabilities(onnx_prob_fn(fp32_path), check_data, pad_id, 8)
    )
    int8_diff = max_abs_diff(
        reference_probs, token_probabilities(onnx_prob_fn(int8_path), check_data, pad_id, 8)
    )
    log(
        f"export check on {len(check_data)} validation answers: max |p_torch - p_onnx| fp32 {fp32_diff:.2e} "
        f"(tolerance {FP32_TOLERANCE:g}), int8 {int8_diff:.4f} (tolerance {args.int8_tolerance:g})"
    )
    if fp32_diff > FP32_TOLERANCE or int8_diff > args.int8_tolerance:
        sys.exit(
            f"FAILED: the exported model does not reproduce the torch model (fp32 {fp32_diff:.2e}, "
            f"int8 {int8_diff:.4f}); model left in {args.out} for inspection"
        )

    shipped = onnx_prob_fn(int8_path)
    results = {}
    probs = {}
    for name, part in eval_data.items():
        probs[name] = token_probabilities(shipped, part, pad_id, args.eval_batch)
        results[name] = figures(part, probs[name])
    # The answer-level threshold a user would set (scoring.detector_threshold: an answer fails when any token
    # reaches it) is chosen on validation alone; every part is also reported at it.
    chosen = choose_threshold(eval_data["validation"], probs["validation"])
    for name, part in eval_data.items():
        at = figures(part, probs[name], chosen)
        results[name]["validation_threshold"] = chosen
        results[name]["balanced_accuracy_at_validation_threshold"] = at["balanced_accuracy"]
        log(f"int8 ONNX on {name}: {json.dumps(results[name])}")
    if args.scores is not None:
        write_scores(args.scores, eval_data, probs)

    plain = Tokenizer.from_file(str(args.base / "tokenizer.json"))
    plain.no_padding()
    plain.no_truncation()
    plain.save(str(args.out / "tokenizer.json"))
    training = manifest["training"]
    base = manifest["base"]
    meta = {
        "format_version": FORMAT_VERSION,
        "tiny": bool(args.tiny),
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **_base_fields(bool(args.tiny), base),
        "architecture": manifest["architecture"],
        "parameters": manifest["parameters"],
        "max_length": args.max_length,
        "labels": {"0": "supported", str(HALLUCINATED_LABEL): "hallucinated"},
        "inputs": list(INPUT_NAMES),
        "output": OUTPUT_NAME,
        "onnx": {
            "opset": 17,
            "quantization": "onnxruntime quantize_dynamic, QInt8 weights, per channel",
            "max_abs_diff_vs_torch": {
                "fp32": float(f"{fp32_diff:.3g}"),
                "int8": round(int8_diff, 4),
                "answers": len(check_data),
            },
        },
        "training": training,
        "figures": results,
        "files": {},
    }
    write_card_and_metadata(args.out, meta)
    if not args.keep_work:
        shutil.rmtree(work)
    log(
        f"wrote {args.out}: model.onnx {int8_path.stat().st_size / 1e6:.1f} MB; finishing took "
        f"{time.monotonic() - started:.0f} s"
    )


def _base_fields(tiny: bool, base: dict[str, Any]) -> dict[str, Any]:
    """What the model starts from: a tiny model borrows only its base's tokenizer and (scaled-down) config."""
    if tiny:
        return {"base_model": None, "base_model_sha256": None, "tokenizer_from": base["name"]}
    return {
        "base_model": base["name"],
        "base_model_sha256": base.get("weights_sha256"),
        "tokenizer_from": base["name"],
    }


def write_card_and_metadata(out: Path, meta: dict[str, Any]) -> None:
    """``MODEL_CARD.md`` from the template, then ``detector.json`` with the sha256 of every file."""
    card = string.Template((Path(__file__).parent / "MODEL_CARD.template.md").read_text())
    (out / "MODEL_CARD.md").write_text(card.safe_substitute(_card_fields(meta)))
    meta["files"] = {
        name: sha256_file(out / name) for name in ("model.onnx", "tokenizer.json", "MODEL_CARD.md")
    }
    (out / "detector.json").write_text(json.dumps(meta, indent=2) + "\n")


def rewrite_card(out: Path) -> None:
    """Render the card again from ``detector.json`` (after a template change), keeping every figure."""
    meta = json.loads((out / "detector.json").read_text())
    base = {
        "name": meta.get("tokenizer_from") or meta["base_model"],
        "weights_sha256": meta["base_model_sha256"],
    }
    meta.update(_base_fields(meta["tiny"], base))
    write_card_and_metadata(out, meta)
    log(f"rewrote {out}/MODEL_CARD.md and detector.json")


def _card_fields(meta: dict[str, Any]) -> dict[str, str]:
    def row(name: str) -> str:
        f = meta["figures"].get(name, {})
        return (
            f"| {name} | {f.get('answers', 0)} | {f.get('hallucinated', 0)} | {f.get('auroc')} | "
            f"{f.get('balanced_accuracy')} | {f.get('balanced_accuracy_at_validation_threshold')} | "
            f"{f.get('token_f1')} |"
        )

    t = meta["training"]
    return {
        "title": ("TINY TEST MODEL - not for use: " if meta["tiny"] else "") + "faithtrace detector",
        "tiny_note": (
            "This is a tiny model (2 layers, random start) trained on a CPU so that the tests run a real "
            "model end to end. Its figures are near chance. Never use it to judge answers."
            if meta["tiny"]
            else "Trained with training/run.sh; figures below are the shipped int8 file's."
        ),
        "base_model": (
            f"none (random weights; the tokenizer of {meta['tokenizer_from']} and its config scaled down)"
            if meta["tiny"]
            else f"{meta['base_model']}, Apache-2.0"
        ),
        "architecture": meta["architecture"],
        "parameters": f"{meta['parameters'] / 1e6:.2f}M",
        "max_length": str(meta["max_length"]),
        "train_answers": str(t["train_answers_used"]),
        "synthetic": ", ".join(f"{k} {v}" for k, v in sorted(t["synthetic"].items())) or "none",
        "epochs": f"{t['best_epoch']} of {t['epochs']}",
        "trained_layers": _trained_layers(t),
        "device": f"{t['device_name']}, {t['precision']}, {t['train_seconds']} s",
        "figure_rows": "\n".join(row(n) for n in ("validation", "heldout", "dev", "heldout_synthetic")),
        "validation_threshold": _threshold_text(meta["figures"].get("validation", {})),
        "created": meta["created"],
    }


def _threshold_text(validation: dict[str, Any]) -> str:
    chosen = validation.get("validation_threshold")
    return "not chosen" if chosen is None else f"{chosen:.4f}"


def _trained_layers(training: dict[str, Any]) -> str:
    frozen = training.get("freeze_below") or 0
    if not frozen:
        return "every weight (full fine-tuning)."
    kept = "layer 0" if frozen == 1 else f"layers 0-{frozen - 1}"
    return (
        f"**partially fine-tuned**: the embeddings and {kept} keep the base model's weights; "
        f"only layers {frozen} and above and the token head were trained "
        f"({training['trained_parameters'] / 1e6:.1f}M weights), on a CPU from the frozen layers' outputs "
        "computed once (training/cached.py). A fully fine-tuned model is expected to do better."
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "phase",
        choices=("cache", "train", "finish", "all", "card"),
        help="cache: the frozen lower layers' outputs into --cache (training with --freeze-below fills it "
        "too); train: weights into --transfer; finish: --transfer into a model folder (--out); all: train "
        "and finish; card: render OUT's MODEL_CARD.md again from its detector.json",
    )
    p.add_argument(
        "--transfer", type=Path, help="the trained weights between the phases (default OUT/.transfer)"
    )
    p.add_argument(
        "--base",
        type=Path,
        help="model folder: config.json, model.safetensors, tokenizer.json",
    )
    p.add_argument("--base-name", default="sentence-transformers/all-mpnet-base-v2")
    p.add_argument("--base-sha256", default="")
    p.add_argument("--out", type=Path)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument(
        "--tiny", action="store_true", help="a 2-layer randomly initialised model of the base's kind"
    )
    p.add_argument("--tiny-hidden", type=int, default=64)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=4e-5)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--eval-batch", type=int, default=32)
    p.add_argument("--warmup", type=float, default=0.1)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--max-train", type=int, default=0, help="train on a random subset of this many answers")
    p.add_argument("--max-eval", type=int, default=0, help="evaluate on the first N answers of each part")
    p.add_argument(
        "--synthetic-ratio", type=float, default=0.5, help="synthetic examples per real training answer"
    )
    p.add_argument("--validation-fraction", type=float, default=0.1)
    p.add_argument("--heldout-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--cpu", action="store_true", help="train on the CPU even where a GPU is present")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--check-examples", type=int, default=32)
    p.add_argument("--int8-tolerance", type=float, default=0.25)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--keep-work", action="store_true", help="keep the fp32 ONNX file in OUT/.work")
    p.add_argument(
        "--scores",
        type=Path,
        help="finish: write each evaluated answer's highest int8 probability here (JSONL)",
    )
    p.add_argument(
        "--freeze-below",
        type=int,
        default=0,
        help="train only layers N.. and the head, from the lower layers' outputs cached once (CPU; "
        "training/cached.py); 0: every weight trains",
    )
    p.add_argument(
        "--cache", type=Path, help="where the frozen layers' outputs are kept (with --freeze-below)"
    )
    p.add_argument(
        "--cache-layers",
        type=int,
        nargs="+",
        help="the layers whose outputs the cache keeps (default: the --freeze-below layer); one cache of "
        "several serves several --freeze-below",
    )
    p.add_argument(
        "--checkpoint-minutes",
        type=float,
        default=0,
        help="save a checkpoint in --transfer this often and after each epoch (0: never)",
    )
    p.add_argument("--resume", action="store_true", help="go on from --transfer's checkpoint if there is one")
    args = p.parse_args(argv)
    if args.freeze_below or args.phase == "cache":
        if args.cache is None:
            p.error("--freeze-below and the cache phase need --cache DIR")
        if not args.cache_layers:
            if not args.freeze_below:
                p.error("the cache phase needs --cache-layers or --freeze-below")
            args.cache_layers = [args.freeze_below]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.phase == "card":
        rewrite_card(args.out)
        return
    if args.base is None:
        sys.exit("--base is needed: a model folder with config.json, model.safetensors and tokenizer.json")
    if args.phase == "cache":
        torch.set_num_threads(args.threads)
        data = prepare(args)
        store = cached.store_for(args, {k: getattr(args, k) for k in _DATA_ARGS})
        cached.build_cache(args, data, build_model(args), store)
        log(f"cache {args.cache} complete: {json.dumps(store.costs())}")
        return
    if args.transfer is None:
        if args.out is None:
            sys.exit("--transfer or --out is needed")
        args.transfer = args.out / ".transfer"
    if args.phase in ("train", "all"):
        run_training(args)
    if args.phase in ("finish", "all"):
        if args.out is None:
            sys.exit("finish needs --out")
        run_finish(args)


if __name__ == "__main__":
    main()
