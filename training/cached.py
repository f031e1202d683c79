"""Train only the top layers of the encoder on a CPU, from the frozen lower layers' outputs computed once.

A full forward and backward pass of mpnet-base over a 512-token example takes seconds on a small CPU, and
most of it is spent in layers that need not change much. With ``--freeze-below N`` the embeddings and layers
``0..N-1`` keep the base weights; layers ``N..`` and the token head train. The ``cache`` phase runs the frozen
part once over every example (an ONNX export of it through onnxruntime, several times faster than torch here)
and stores the output of each layer named by ``--cache-layers`` in fp16 (``training.cache_store``); training
then reads the cached output at the highest cached layer not above N, runs any frozen layers between it and N
without gradients, and trains the rest. One cache of layers 8, 10 and 11 serves N = 8, 10 and 11.

Only the answer's tokens carry labels, so the last layer computes its queries, feed-forward and head for
those tokens alone (keys and values still cover the whole input): the same numbers as the whole layer, at a
fraction of its cost. ``CachedRoute`` checks, before training, that the cache and this shortcut reproduce
the full model's probabilities on real validation answers.

The exported model is the whole network (base lower layers + trained top), so ``finish`` exports, quantises
and measures it exactly as after a full fine-tune; every shipped figure comes from the int8 file on the real
inputs, not from the cache.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import onnxruntime as ort
import torch

from training import prep
from training.cache_store import SHARD_EXAMPLES, Store, example_key
from training.fetch_base import sha256_file

if TYPE_CHECKING:
    import argparse

    from training.train import Encoded, Prepared

__all__ = ["CachedRoute", "build_cache", "store_for"]

# The cached outputs are fp16: the probabilities they lead to differ from the full fp32 model's by about 1e-3.
# Beyond this, the cache, the frozen layers or the answer-rows shortcut do not reproduce the model.
CHECK_TOLERANCE = 0.02

T = TypeVar("T")


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _encoder(model: torch.nn.Module) -> Any:
    base = getattr(model, model.base_model_prefix)
    return base.encoder


def _embeddings(model: torch.nn.Module) -> Any:
    return getattr(model, model.base_model_prefix).embeddings


def _additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[batch, tokens] of 1/0 → the [batch, 1, 1, tokens] bias the attention adds (0 or a very negative)."""
    return (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class LowerLayers(torch.nn.Module):
    """Embeddings and the first ``max(levels)`` layers; returns the hidden states after each level."""

    def __init__(self, model: torch.nn.Module, levels: Sequence[int]) -> None:
        super().__init__()
        self.embeddings = _embeddings(model)
        self.encoder = _encoder(model)
        self.levels = sorted(levels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden = self.embeddings(input_ids=input_ids)
        bias = self.encoder.compute_position_bias(hidden)
        mask = _additive_mask(attention_mask, hidden.dtype)
        out = []
        for i, layer in enumerate(self.encoder.layer[: self.levels[-1]], 1):
            hidden = layer(hidden, mask, bias)[0]
            if i in self.levels:
                out.append(hidden)
        return tuple(out)


def store_for(args: argparse.Namespace, data_args: dict[str, Any]) -> Store:
    """The cache folder for this base, these layers and these data settings."""
    weights = args.base / "model.safetensors"
    identity = {
        "base_weights_sha256": sha256_file(weights) if weights.exists() else f"random:{args.seed}",
        "data_sha256": sha256_file(args.data),
        **data_args,
    }
    return Store(args.cache, identity, args.cache_layers)


def _export_lower(
    model: torch.nn.Module, levels: Sequence[int], sample: Encoded, pad_id: int, path: Path
) -> None:
    lower = LowerLayers(model, levels).eval()
    # A padded second row, as in train.export_onnx: traced without padding, the graph may drop the mask.
    half = len(sample.ids) // 2
    ids = torch.tensor([sample.ids, sample.ids[:half] + [pad_id] * (len(sample.ids) - half)])
    mask = torch.ones_like(ids)
    mask[1, half:] = 0
    axes = {0: "batch", 1: "tokens"}
    names = [f"layer{level}" for level in sorted(levels)]
    torch.onnx.export(
        lower,
        (ids, mask),
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=names,
        dynamic_axes={"input_ids": axes, "attention_mask": axes, **{n: axes for n in names}},
        opset_version=17,
        dynamo=False,
    )
    session = _session(path)
    with torch.no_grad():
        expected = lower(ids[:1], mask[:1])
    got = session.run(None, {"input_ids": ids[:1].numpy(), "attention_mask": mask[:1].numpy()})
    diff = max(float(np.abs(e.numpy() - g).max()) for e, g in zip(expected, got, strict=True))
    _log(f"lower layers exported to {path}: max |torch - onnx| {diff:.2e}")
    if diff > 1e-3:
        raise SystemExit(f"the exported lower layers do not reproduce torch (max diff {diff:.2e})")


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _shard(items: Sequence[T], shard: int) -> Sequence[T]:
    return items[shard * SHARD_EXAMPLES : (shard + 1) * SHARD_EXAMPLES]


def _parts(data: Prepared) -> dict[str, list[Encoded]]:
    return {"train": data.train_data, **data.eval_data}


def build_cache(args: argparse.Namespace, data: Prepared, model: torch.nn.Module, store: Store) -> None:
    """Compute and store the frozen layers' outputs for every part; resumes where an earlier run stopped."""
    onnx_path = store.root / "lower.onnx"
    if not onnx_path.exists():
        sample = max(data.eval_data["validation"], key=lambda e: len(e.ids))
        tmp = onnx_path.with_name("lower.onnx.tmp")
        _export_lower(model, store.levels, sample, data.pad_id, tmp)
        os.replace(tmp, onnx_path)
    session = _session(onnx_path)
    for part, examples in _parts(data).items():
        keys = [example_key(e.ids) for e in examples]
        todo = [s for s in range(store.shards(len(keys))) if not store.has_shard(part, s, _shard(keys, s))]
        if not todo:
            continue
        started, tokens = time.monotonic(), 0
        load_start = os.getloadavg()[0]
        for n, shard in enumerate(todo, 1):
            chunk = _shard(examples, shard)
            outputs: dict[int, list[np.ndarray]] = {level: [] for level in store.levels}
            for e in chunk:
                ids = np.asarray([e.ids], dtype=np.int64)
                got = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
                for level, hidden in zip(store.levels, got, strict=True):
                    outputs[level].append(hidden[0])
                tokens += len(e.ids)
            store.write_shard(part, shard, _shard(keys, shard), outputs)
            spent = time.monotonic() - started
            left = spent / n * (len(todo) - n)
            _log(
                f"cache {part}: shard {shard + 1}/{store.shards(len(keys))}, {tokens / spent:.0f} tokens/s, "
                f"{left / 60:.0f} min left for this part (load {os.getloadavg()[0]:.1f})"
            )
        seconds = time.monotonic() - started
        store.record_cost(
            part,
            {
                "examples": sum(len(_shard(examples, s)) for s in todo),
                "tokens": tokens,
                "seconds": round(seconds, 1),
                "seconds_per_1k_tokens": round(1000 * seconds / max(1, tokens), 3),
                "load_average_1m": [round(load_start, 1), round(os.getloadavg()[0], 1)],
                "layers": store.levels,
                "runtime": f"onnxruntime {ort.__version__} fp32, 2 threads",
            },
        )


def _answer_span(e: Encoded) -> tuple[int, int]:
    """Positions of the answer's tokens: one contiguous run (the second segment of the pair)."""
    marked = [i for i, label in enumerate(e.labels) if label != prep.IGNORE]
    return marked[0], marked[-1] + 1


class CachedRoute:
    """Training and scoring through the trainable top of ``model``, fed from the cache.

    ``loss`` and ``probabilities`` are what ``train.run_training`` asks of a route; the full fine-tune's
    route runs the whole model instead.
    """

    def __init__(
        self, args: argparse.Namespace, model: torch.nn.Module, data: Prepared, store: Store
    ) -> None:
        self.model = model
        self.encoder = _encoder(model)
        n_layers = len(self.encoder.layer)
        self.freeze_below = args.freeze_below
        if not 0 < self.freeze_below < n_layers:
            raise SystemExit(f"--freeze-below must lie in 1..{n_layers - 1}")
        usable = [level for level in store.levels if level <= self.freeze_below]
        if not usable:
            raise SystemExit(
                f"the cache holds layers {store.levels}; --freeze-below {self.freeze_below} needs one at or "
                "below it"
            )
        self.level = max(usable)
        for p in model.parameters():
            p.requires_grad = False
        for p in [*self.encoder.layer[self.freeze_below :].parameters(), *model.classifier.parameters()]:
            p.requires_grad = True
        self.parts = _parts(data)
        self.hidden = {
            part: store.read(part, self.level, [example_key(e.ids) for e in examples])
            for part, examples in self.parts.items()
        }
        self.trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        _log(
            f"cached route: layers {self.freeze_below}..{n_layers - 1} and the head train "
            f"({self.trainable / 1e6:.1f}M weights), frozen layers from the cache at layer {self.level}"
        )
        self._check(data)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _forward(self, part: str, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [batch, answer tokens, 2] of the examples, and their labels (IGNORE where padded)."""
        examples = [self.parts[part][i] for i in indices]
        width = max(len(e.ids) for e in examples)
        hidden = torch.zeros(len(examples), width, self.encoder.config.hidden_size)
        mask = torch.zeros(len(examples), width)
        spans = [_answer_span(e) for e in examples]
        rows = max(b - a for a, b in spans)
        positions = torch.zeros(len(examples), rows, dtype=torch.long)
        labels = torch.full((len(examples), rows), prep.IGNORE, dtype=torch.long)
        for r, (i, e, (a, b)) in enumerate(zip(indices, examples, spans, strict=True)):
            hidden[r, : len(e.ids)] = torch.from_numpy(np.asarray(self.hidden[part][i], dtype=np.float32))
            mask[r, : len(e.ids)] = 1
            positions[r, : b - a] = torch.arange(a, b)
            positions[r, b - a :] = a  # padding rows: any real position, their labels are ignored
            labels[r, : b - a] = torch.tensor(e.labels[a:b])
        additive = _additive_mask(mask, hidden.dtype)
        layers = self.encoder.layer
        whole_layers = [*layers[self.level : len(layers) - 1]]
        # The position bias of every token pair ([batch, heads, tokens, tokens]) costs about a fifth of a step
        # when only the last layer trains, which computes its own for the answer's rows.
        bias = self.encoder.compute_position_bias(hidden) if whole_layers else None
        with torch.no_grad():
            for layer in layers[self.level : self.freeze_below]:
                # Frozen layers without dropout, as the cached ones below them were computed.
                layer.eval()
                hidden = layer(hidden, additive, bias)[0]
        for layer in layers[self.freeze_below : len(layers) - 1]:
            hidden = layer(hidden, additive, bias)[0]
        out = _rows_through_layer(self.encoder, layers[-1], hidden, additive, positions)
        logits = self.model.classifier(self.model.dropout(out))
        return logits, labels

    def loss(self, batch: Sequence[int], loss_fn: torch.nn.Module) -> torch.Tensor:
        logits, labels = self._forward("train", batch)
        result: torch.Tensor = loss_fn(logits.view(-1, 2), labels.view(-1))
        return result

    def probabilities(
        self, part: str, indices: Sequence[int] | None = None, batch: int = 16
    ) -> list[np.ndarray]:
        """P(hallucinated) per answer token of each example of ``part`` (or of ``indices`` into it), in order,
        as ``train.token_probabilities`` gives them. Switches the model to eval mode."""
        self.model.eval()
        chosen = list(range(len(self.parts[part]))) if indices is None else list(indices)
        order = sorted(range(len(chosen)), key=lambda i: len(self.parts[part][chosen[i]].ids))
        result: list[np.ndarray] = [np.empty(0)] * len(chosen)
        with torch.no_grad():
            for start in range(0, len(order), batch):
                rows = order[start : start + batch]
                logits, labels = self._forward(part, [chosen[r] for r in rows])
                probs = torch.softmax(logits, dim=-1)[..., prep.HALLUCINATED_LABEL].numpy()
                for row, index in enumerate(rows):
                    result[index] = probs[row][labels[row].numpy() != prep.IGNORE]
        return result

    def _check(self, data: Prepared) -> None:
        """The cache and the answer-rows shortcut give the full model's probabilities (eval mode)."""
        from training.train import token_probabilities, torch_prob_fn

        self.model.eval()
        sample = data.eval_data["validation"][:4]
        prob_fn = torch_prob_fn(self.model, torch.device("cpu"), False)
        full = token_probabilities(prob_fn, sample, data.pad_id, 4)
        cached = self.probabilities("validation", range(len(sample)), batch=4)
        diff = max(float(np.abs(a - b).max()) for a, b in zip(full, cached, strict=True))
        _log(f"cached route check on {len(sample)} validation answers: max |p_full - p_cached| {diff:.1e}")
        if diff > CHECK_TOLERANCE:
            raise SystemExit(f"the cached route does not reproduce the model (max diff {diff:.3f})")


def _rows_through_layer(
    encoder: Any, layer: Any, hidden: torch.Tensor, additive: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """``layer``'s output at ``positions`` only ([batch, rows] indices): keys and values over every token.

    The same arithmetic as ``MPNetLayer.forward`` (attention, residual LayerNorm, feed-forward) with the
    queries restricted to the rows asked for; the relative position bias is computed for those rows.
    """
    attention = layer.attention
    attn = attention.attn
    batch, tokens, _ = hidden.shape
    heads, size = attn.num_attention_heads, attn.attention_head_size
    picked = torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
    q = attn.q(picked).view(batch, -1, heads, size).transpose(1, 2)
    k = attn.k(hidden).view(batch, tokens, heads, size).transpose(1, 2)
    v = attn.v(hidden).view(batch, tokens, heads, size).transpose(1, 2)
    relative = torch.arange(tokens)[None, None, :] - positions[..., None]
    # The encoder's own bucketing, with its defaults, as compute_position_bias calls it.
    buckets = encoder.relative_position_bucket(relative)
    bias = encoder.relative_attention_bias(buckets).permute(0, 3, 1, 2)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(size) + bias + additive
    probs = attn.dropout(torch.softmax(scores, dim=-1))
    context = torch.matmul(probs, v).transpose(1, 2).reshape(batch, -1, heads * size)
    attended = attention.LayerNorm(attention.dropout(attn.o(context)) + picked)
    return layer.output(layer.intermediate(attended), attended)  # type: ignore[no-any-return]
