"""The parallel svmlight reader: the numba kernel against scikit-learn's parser (the reference),
parallel against serial reads, and errors that name the right line whatever the blocking."""

from __future__ import annotations

import bz2
import gzip
import lzma

import numpy as np
import pytest

from dpdist.data.svmlight import (
    SvmlightFormatError,
    _parse_fast,
    _parse_reference,
    _public_reason,
    iter_svmlight_blocks,
    parse_block,
)
from dpdist.exceptions import ParameterError

TRICKY = [
    b"1 1:0.5 3:-2\n# a comment line\n-1 2:1.25\n1 1:1 2:2 3:3 # trailing comment\n\n-1 3:7e-3\n",
    b"1 qid:3 1:2\n2 qid:x:y 4:5\n3 qidfoo:1\n1 qid:7\n",
    b"+1 1:+.5 2:-5. 3:1E+05 4:0e999 5:-0 6:1.7976931348623157e308 7:-0.0e-5\r\n",
    b"1 1:0.1234567890123456789 2:123456789012345678901234 3:1.0000000000000000001 4:4.9e-324\n",
    b"1 1:2.2250738585072014e-308 2:1e-400 3:9007199254740993 4:9007199254740992 5:1e22 6:1e23 7:1e-22 8:1e-23\n",
    b"  \t\x0b\x0c 1\n1 # only a label\n1 1:1#comment glued\n1#x\n\r\n# \x00 binary in a comment\n",
    b"1 0:1 2147483647:2\n",
    b"0.5 1:007 2:3.25e-2\n-2.5e1 10:1",  # no final newline
    b"1 1_0:3\n1 3:1_0\n1 +3:1\n",  # underscores and a signed index: Python's int/float accept them (reference path)
]

BAD = [
    (b"1 2:x\n", "float"),
    (b"1 5:1 3:2\n", "sorted"),
    (b"1 3:1 3:2\n", "sorted"),
    (b"abc 3:1\n", "abc"),
    (b"1 3\n", "unpack"),
    (b"1 -3:1\n", "Invalid index"),
    (b"1 3:nan\n", "non-finite"),
    (b"inf 3:1\n", "non-finite"),
    (b"1 3:1e400\n", "non-finite"),
    (b"1 2147483648:1\n", "index out of range"),
    (b"1 1:1 qid:3\n", "qid"),
    (b"1 qid 2:3\n", "unpack"),
    (b"1 3:1:2\n", "float"),
    (b"1 :1\n", "int"),
    (b"1 3:\n", "float"),
    (b"1\x00 3:1\n", "float"),
]


def assert_same(got, ref):
    for a, b in zip(got, ref, strict=True):
        assert a.shape == b.shape
        assert np.array_equal(a, b)
        if a.dtype.kind == "f":
            assert np.array_equal(np.signbit(a), np.signbit(b))  # -0.0 stays -0.0


@pytest.mark.parametrize("text", TRICKY)
def test_kernel_equals_reference(text):
    ref = _parse_reference(text)
    got = _parse_fast(text)
    if got is not None:  # None: the block goes to the reference parser
        assert_same(got, ref)
    block = parse_block(text)
    assert_same((block.indptr, block.indices, block.data, block.y), ref)


def test_kernel_takes_the_common_forms():
    # the forms LIBSVM files use are parsed by the kernel itself, not handed to the reference
    for text in TRICKY[:8]:
        assert _parse_fast(text) is not None, text


@pytest.mark.parametrize(("text", "reason"), BAD)
def test_kernel_refuses_what_the_reference_refuses(text, reason):
    assert _parse_fast(text) is None
    with pytest.raises(ValueError, match=reason):
        _parse_reference(text)
    with pytest.raises(SvmlightFormatError) as info:
        parse_block(b"1 1:1\n# c\n" + text, "f.svm", first_line=10)
    assert info.value.line == 12 and info.value.path == "f.svm"
    try:
        _parse_reference(text)
    except ValueError as e:  # the kind of error is named, the parser's own text (it quotes the token) is not
        assert str(info.value) == f"f.svm:12: malformed svmlight line: {_public_reason(str(e))}" != str(e)
        assert _public_reason(str(e)) != "not svmlight text" or b"qid" in text or b" :" in text


def test_numbers_are_correctly_rounded():
    rng = np.random.default_rng(0)
    tokens = []
    for _ in range(20000):
        s = str(rng.integers(0, 10 ** int(rng.integers(1, 19))))
        p = int(rng.integers(0, len(s) + 1))
        if rng.random() < 0.7:
            s = s[:p] + "." + s[p:]
        if rng.random() < 0.3:
            s += f"e{int(rng.integers(-30, 30))}"
        tokens.append(("-" if rng.random() < 0.2 else "") + s)
    tokens += [repr(float(x)) for x in rng.lognormal(0, 3, 5000)] + ["%.16g" % x for x in rng.random(5000)]
    text = "".join(f"{t} 1:{t}\n" for t in tokens).encode()
    got = _parse_fast(text)
    ref = np.array([float(t) for t in tokens])
    assert got is not None
    assert np.array_equal(got[2].view(np.int64), ref.view(np.int64))
    assert np.array_equal(got[3].view(np.int64), ref.view(np.int64))


def _concat(blocks):
    blocks = list(blocks)
    indptr = [np.zeros(1, dtype=np.int64)]
    nnz = 0
    for b in blocks:
        indptr.append(b.indptr[1:] + nnz)
        nnz += b.indptr[-1]
    return (
        np.concatenate(indptr),
        np.concatenate([b.indices for b in blocks]).astype(np.int64),
        np.concatenate([b.data for b in blocks]),
        np.concatenate([b.y for b in blocks]),
    )


def _mixed_file(rng: np.random.Generator, rows: int) -> bytes:
    lines = []
    for i in range(rows):
        cols = np.sort(rng.choice(5000, rng.integers(0, 12), replace=False)) + 1
        feats = " ".join(f"{c}:{rng.choice(['1', '0.5', '-2.25e-3', repr(float(rng.normal()))])}" for c in cols)
        line = f"{rng.choice(['1', '-1', '+1', '0'])} {'qid:%d ' % i if i % 7 == 0 else ''}{feats}"
        if i % 11 == 0:
            line += " # comment"
        if i % 13 == 0:
            lines.append("")
        if i % 17 == 0:
            line = line.replace(" ", "\t", 1)
        if i == rows // 2:
            line += " 99999:1_0"  # an underscore: this line's block goes to the reference parser
        lines.append(line)
    return ("\r\n".join(lines[: rows // 3]) + "\r\n" + "\n".join(lines[rows // 3 :])).encode()


@pytest.mark.parametrize("block_bytes", [1 << 10, 1 << 13, 1 << 20])
def test_parallel_read_equals_serial_and_reference(tmp_path, block_bytes):
    text = _mixed_file(np.random.default_rng(block_bytes), 3000)
    p = tmp_path / "m.svm"
    p.write_bytes(text)
    ref = _parse_reference(text)
    serial = _concat(iter_svmlight_blocks(p, block_bytes, n_threads=1))
    parallel = _concat(iter_svmlight_blocks(p, block_bytes, n_threads=3))
    assert_same(serial, ref)
    assert_same(parallel, ref)


def test_compressed_inputs_read_the_same(tmp_path):
    text = _mixed_file(np.random.default_rng(1), 800)
    ref = _parse_reference(text)
    for suffix, opener in (("", open), (".bz2", bz2.open), (".gz", gzip.open), (".xz", lzma.open)):
        p = tmp_path / f"c.svm{suffix}"
        with opener(p, "wb") as f:
            f.write(text)
        assert_same(_concat(iter_svmlight_blocks(p, 1 << 11, n_threads=2)), ref)


@pytest.mark.parametrize(("where", "bad_index"), [("first", 300), ("last", 299), ("middle", 350)])
def test_error_at_a_block_boundary_names_its_line(tmp_path, where, bad_index):
    lines = [b"1 1:1 2:22\n"] * 2000  # 11 bytes: blocks of 1100 bytes are exactly 100 lines
    lines[bad_index] = b"1 1:1 2:xx\n"  # the first line of a block, the last of one, or inside one
    p = tmp_path / "b.svm"
    p.write_bytes(b"".join(lines))
    for threads in (1, 2):
        rows = 0
        with pytest.raises(SvmlightFormatError, match="not a number") as info:
            for block in iter_svmlight_blocks(p, 1100, n_threads=threads):
                rows += block.y.size
        assert info.value.line == bad_index + 1 and info.value.path == str(p) and "xx" not in str(info.value)
        assert rows == bad_index // 100 * 100  # the blocks before its block were yielded


def test_first_error_in_file_order_wins(tmp_path):
    # the later block's error may be found first by another thread; the earlier one is reported
    lines = [b"1 1:1\n"] * 20000
    lines[15000] = b"1 1:x\n"
    lines[40] = b"1 1:y\n"
    p = tmp_path / "two.svm"
    p.write_bytes(b"".join(lines))
    seen = 0
    with pytest.raises(SvmlightFormatError, match="not a number") as info:
        for b in iter_svmlight_blocks(p, 1 << 12, n_threads=4):
            seen += b.y.size
    assert info.value.line == 41 and seen < 41


def test_io_error_in_the_reader_thread_reaches_the_caller(tmp_path, monkeypatch):
    p = tmp_path / "broken.svm.bz2"
    p.write_bytes(bz2.compress(b"1 1:1\n" * 1000)[:-20])
    # a truncated file's EOFError reaches the caller as the one-line refusal naming the file
    with pytest.raises(ParameterError, match=f"{p}: corrupt or truncated"):
        for _ in iter_svmlight_blocks(p, 1 << 10, n_threads=2):
            pass
    # the machine's I/O error (an errno) reaches it as it is
    import errno

    def failing(f, block_bytes):
        yield b"1 1:1\n", 1
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("dpdist.data.svmlight._read_blocks", failing)
    with pytest.raises(OSError) as e:
        for _ in iter_svmlight_blocks(p, 1 << 10, n_threads=2):
            pass
    assert e.value.errno == errno.EIO
