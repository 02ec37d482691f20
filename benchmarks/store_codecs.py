"""Store layout choice: codecs and chunk sizes for the sparse arrays (issue 16).

Part 1 -- codecs on the arrays a store holds, taken from synthetic sets with KDDA's profile
(binary values, int32 column indices sorted within rows, int32 row indices ascending
within columns, int64 pointers) and Webspam's (real TF-IDF-like values): compression ratio
and single-thread encode / decode speed with numcodecs, in 2^21-element chunks, best of 3.

Part 2 -- zarr end to end: write and read back a CSC-indices-like int32 array and a binary
float64 array through zarr (the path a store read takes: chunk files, codec pipeline,
copy into the result) for the candidate codecs and chunk sizes, plain and sharded.

The store uses the result: Blosc LZ4 over a byte shuffle (``dpdist.data.store.format.CODEC``) in
2^21-element chunks. Prints the load average beside the figures (shared machine). The claim is
checked as: the store's codec for each array (shuffle for the integer arrays, no shuffle for the
values) decodes faster than zarr's default (zstd-0) on every array in part 1, and reads back through
zarr at 2^21-element chunks faster than zstd-0 in part 2. Writes
``benchmarks/results/scale/<UTC date>-store_codecs.md`` and ``.csv`` (both parts, one row per cell).

    .venv/bin/python benchmarks/store_codecs.py [--rows 300000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_file import header, table, today, topic_dir, write_md  # noqa: E402

COLUMNS = ["part", "array", "codec", "chunk", "shard", "ratio", "encode or write MB/s", "decode or read MB/s"]


def store_codec(array: str) -> str:
    """The codec the store uses for ``array`` (``dpdist.data.store.format``)."""
    return "blosc-lz4 noshuffle" if "values" in array else "blosc-lz4 shuffle"


def best_of(f, reps: int = 3) -> float:
    t = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        t = min(t, time.perf_counter() - t0)
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    cells: list[list[object]] = []
    import numcodecs.blosc
    import zarr
    from numcodecs import LZ4, Blosc, Zstd
    from zarr.codecs import BloscCodec, ZstdCodec

    from dpdist.data.synthetic import make_synthetic

    numcodecs.blosc.use_threads = False  # one thread per chunk, as in zarr's codec pipeline
    X, _ = make_synthetic("kdda", random_state=0, n=args.rows).materialize()
    C = X.tocsc()
    W, _ = make_synthetic("webspam", random_state=0, n=max(1000, args.rows // 100)).materialize()
    arrays = {
        "KDDA CSR indices (i4)": X.indices.astype(np.int32),
        "KDDA CSC indices (i4)": C.indices.astype(np.int32),
        "KDDA values (f8, 1.0)": X.data,
        "KDDA CSC indptr (i8)": C.indptr.astype(np.int64),
        "Webspam values (f8)": W.data,
        "Webspam CSR indices (i4)": W.indices.astype(np.int32),
    }
    codecs = {
        "zstd-0 (zarr default)": Zstd(level=0),
        "zstd-1": Zstd(level=1),
        "zstd-5": Zstd(level=5),
        "lz4": LZ4(),
        "blosc-lz4 noshuffle": Blosc("lz4", 5, Blosc.NOSHUFFLE),
        "blosc-lz4 shuffle": Blosc("lz4", 5, Blosc.SHUFFLE),
        "blosc-lz4 bitshuffle": Blosc("lz4", 5, Blosc.BITSHUFFLE),
        "blosc-zstd1 shuffle": Blosc("zstd", 1, Blosc.SHUFFLE),
        "blosc-zstd3 bitshuffle": Blosc("zstd", 3, Blosc.BITSHUFFLE),
    }
    chunk = 1 << 21
    print(
        f"Part 1: numcodecs, one thread, {chunk:,}-element chunks (KDDA profile {args.rows:,} rows, "
        f"{X.nnz:,} nnz; load {os.getloadavg()[0]:.1f})\n"
    )
    print("| array | codec | ratio | encode MB/s | decode MB/s |\n|---|---|---:|---:|---:|")
    for an, a in arrays.items():
        chunks = [a[i : i + chunk] for i in range(0, a.size, chunk)]
        print(f"| {an} | none | 1.00 | - | - |")
        for cn, c in codecs.items():
            enc = [c.encode(ch) for ch in chunks]
            te = best_of(lambda: [c.encode(ch) for ch in chunks])
            td = best_of(lambda: [c.decode(e) for e in enc])
            size = sum(len(e) for e in enc)
            print(f"| {an} | {cn} | {a.nbytes / size:.2f} | {a.nbytes / te / 1e6:,.0f} | {a.nbytes / td / 1e6:,.0f} |")
            cells.append([1, an, cn, chunk, "-", f"{a.nbytes / size:.2f}", f"{a.nbytes / te / 1e6:.0f}"])
            cells[-1].append(f"{a.nbytes / td / 1e6:.0f}")

    print(f"\nPart 2: zarr write + full read back (load {os.getloadavg()[0]:.1f})\n")
    print("| array | codec | chunk | shard | write MB/s | read MB/s | size ratio |\n|---|---|---:|---:|---:|---:|---:|")
    blosc = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
    layouts: list[tuple[str, Any, int, int | None]] = [
        ("zstd-0 (v1 stores)", ZstdCodec(level=0), 1 << 21, None),
        ("none", None, 1 << 21, None),
    ]
    layouts += [("blosc-lz4 shuffle", blosc, c, None) for c in (1 << 19, 1 << 20, 1 << 21, 1 << 22, 1 << 23)]
    noshuffle = BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle")
    layouts += [("blosc-lz4 noshuffle", noshuffle, 1 << 21, None)]
    layouts += [("blosc-lz4 shuffle", blosc, 1 << 19, 1 << 22), ("blosc-lz4 shuffle", blosc, 1 << 20, 1 << 23)]
    work = tempfile.mkdtemp(prefix="store-codecs-")
    try:
        for an in ("KDDA CSC indices (i4)", "KDDA values (f8, 1.0)"):
            a = arrays[an]
            for cn, codec, ch, shard in layouts:
                p = os.path.join(work, "a")
                shutil.rmtree(p, ignore_errors=True)
                kw: dict[str, Any] = {"shards": (shard,)} if shard else {}
                z = zarr.create_array(p, shape=a.shape, chunks=(ch,), dtype=a.dtype, compressors=codec, **kw)
                t0 = time.perf_counter()
                z[:] = a
                tw = time.perf_counter() - t0
                z = zarr.open_array(p, mode="r")
                tr = best_of(lambda: z[:])
                assert np.array_equal(z[:], a)
                size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs)
                print(
                    f"| {an} | {cn} | {ch:,} | {shard or '-'} | {a.nbytes / tw / 1e6:,.0f} | "
                    f"{a.nbytes / tr / 1e6:,.0f} | {a.nbytes / size:.2f} |"
                )
                cells.append([2, an, cn, ch, shard or "-", f"{a.nbytes / size:.2f}", f"{a.nbytes / tw / 1e6:.0f}"])
                cells[-1].append(f"{a.nbytes / tr / 1e6:.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nload average {os.getloadavg()}")
    write_results(args.rows, X.nnz, cells, load)


def write_results(rows: int, nnz: int, cells: list[list[object]], load: float) -> None:
    """The dated results file: the claim's check, then every cell of both parts."""

    def speed(part: int, array: str, codec: str) -> float:
        return next(
            float(str(c[7])) for c in cells if c[:3] == [part, array, codec] and c[3] == 1 << 21 and c[4] == "-"
        )

    checks = []
    for array in dict.fromkeys(str(c[1]) for c in cells):
        for part in (1, 2):
            if any(c[0] == part and c[1] == array for c in cells):
                zstd = "zstd-0 (zarr default)" if part == 1 else "zstd-0 (v1 stores)"
                checks.append((part, array, speed(part, array, store_codec(array)), speed(part, array, zstd)))
    md = header("Store codecs and chunk sizes", "best of 3 decodes / reads; one write per zarr layout", load)
    md += [
        "Claim: the store's codecs (`dpdist.data.store.format`: Blosc LZ4 over a byte shuffle for the integer "
        "arrays, Blosc LZ4 without shuffle for the values) in 2^21-element chunks decode faster than zarr's default "
        f"(zstd level 0). Synthetic KDDA profile, {rows:,} rows ({nnz:,} non-zeros), and a Webspam-profile set of "
        f"{max(1000, rows // 100):,} rows; numcodecs with one thread per chunk.",
        "",
    ]
    stem = topic_dir("scale") / f"{today()}-store_codecs"
    md += ["## The check", ""]
    md += table(
        ["part", "array", "store codec", "its decode / read MB/s", "zstd-0 MB/s", "faster"],
        [[p, a, store_codec(a), f"{m:.0f}", f"{z:.0f}", "yes" if m > z else "no"] for p, a, m, z in checks],
    )
    met = all(m > z for _, _, m, z in checks)
    md += ["", f"Target (faster than zstd-0 on every array, both parts): **{'met' if met else 'not met'}**.", ""]
    md += ["## Every cell (part 1: numcodecs alone; part 2: zarr write and full read back)", ""]
    md += table(COLUMNS, cells, stem.with_suffix(".csv"))
    write_md(stem.with_suffix(".md"), md)


if __name__ == "__main__":
    main()
