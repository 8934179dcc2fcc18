#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora and regression inputs (fuzz/README.md).

    fuzz/make_corpus.py            # rewrites fuzz/corpus/<target>/ and fuzz/regressions/<target>/
    fuzz/make_corpus.py --large D  # writes the large regression inputs (not committed) under D/<target>/

Every input starts with the bytes its target reads first (a control byte, a selector; see the
target's comment). The output is deterministic: tar and gzip times are fixed.
"""
import argparse
import gzip
import io
import lzma
import bz2
import os
import tarfile
import struct
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
MTIME = 1700000000

# fuzz_common.hpp: bit 7 picks a big chunk (bits 0-1: 512 B, 4 KiB, 700 B, 1 MiB), else 1..64
# bytes; bit 6 says whether the source's size is known.
CHUNK_4K_SIZED = 0xC1
CHUNK_4K_UNSIZED = 0x81
CHUNK_7_UNSIZED = 0x06
CHUNK_512_SIZED = 0xC0
CHUNK_700_UNSIZED = 0x82

# fuzz_decode_basic.cpp's kExts, by position.
DECODE_EXTS = ["txt", "text", "transcript", "cls", "cls2", "index", "inx", "id",
               "json", "jsn", "npy", "bin", "txt.gz", "json.gz", "npy.gz", "cls.gz",
               "txt.xz", "npy.xz", "json.bz2", "cls.zst", "txt.gz.gz", "npy.zst.gz", "gz", "bin.gz"]


def gz(data):
    return gzip.compress(data, compresslevel=6, mtime=0)


def make_tar(members, fmt=tarfile.USTAR_FORMAT):
    """members: (name, bytes) pairs, in order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = MTIME
            info.mode = 0o644
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def npy_bytes(descr, shape, data, fortran=False):
    """A format 1.0 .npy file as np.save writes it: the header padded to 64 bytes."""
    dims = f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    text = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {dims}, }}"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + data


def header(name, size_field, typeflag=b"0"):
    """One ustar header block with a raw 12-byte size field (octal or base-256)."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field
    h[136:148] = b"%011o\0" % MTIME
    h[156:157] = typeflag
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b" " * 8
    # Seven digits and a NUL, as some writers store it: no space anywhere in the block (GNU's
    # "%06o\0 " ends in one, which stopped the pax scan of defect 1 inside this header).
    h[148:156] = b"%07o\0" % sum(h)
    return bytes(h)


def octal_size(n):
    return b"%011o\0" % n


def base256_size(n):
    # The high bit of the first byte marks base-256; the value fills the other 95 bits.
    return bytes([0x80]) + n.to_bytes(11, "big")


def pad(data):
    return data + b"\0" * (-len(data) % 512)


END = b"\0" * 1024

SAMPLES = [("s0.txt", b"hello"), ("s0.cls", b"3"), ("s0.json", b'{"a": [1, 2]}'),
           ("s1.txt", b"world"), ("s1.cls", b"7"),
           ("dir.v2/img.seg.png", b"\x89PNG\r\n\x1a\n"), ("dir.v2/img.npy", npy_bytes("<i2", (4,), struct.pack("<4h", 0, 1, 2, 3)))]


WIDS_INDEX = (b'{"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "x", '
              b'"base": "b", "shardlist": [{"url": "a/../s-0.tar", "nsamples": 3, '
              b'"filesize": 10240, "md5sum": "0123456789abcdef0123456789abcdef"}, '
              b'{"url": "s3://b/s-1.tar", "nsamples": 0}], '
              b'"datasets": [{"shardlist": [{"url": "/abs/s-2.tar", "nsamples": 5}]}]}\n')


def index_text(tar_bytes):
    """The v1.2 index text of a plain tar, as wds index writes it (one sample per key run)."""
    lines = []
    key = None
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
        for m in tar.getmembers():
            if not m.isfile():
                continue
            base = m.name.rsplit("/", 1)
            dot = base[-1].find(".")
            k = m.name[:len(m.name) - len(base[-1]) + dot]
            ext = base[-1][dot + 1:]
            group = f"{ext} {m.offset_data} {m.size} {m.name}"
            if k == key:
                lines[-1] += " " + group
            else:
                lines.append(group)
                key = k
    return f"v1.2 {len(lines)}\n" + "".join(l + "\n" for l in lines)


def corpus():
    c = {}
    plain = make_tar(SAMPLES)
    pax = make_tar([("p/" + "long" * 30 + ".txt", b"pax name"), ("p/" + "long" * 30 + ".cls", b"1")],
                   tarfile.PAX_FORMAT)
    gnu = make_tar([("g/" + "name" * 30 + ".txt", b"gnu name")], tarfile.GNU_FORMAT)
    empty = make_tar([])
    c["tar_samples"] = {
        "plain_4k_sized": bytes([CHUNK_4K_SIZED]) + plain,
        "plain_7_unsized": bytes([CHUNK_7_UNSIZED]) + plain,
        "plain_700_unsized": bytes([CHUNK_700_UNSIZED]) + plain,
        "pax": bytes([CHUNK_512_SIZED]) + pax,
        "gnu": bytes([CHUNK_4K_UNSIZED]) + gnu,
        "empty_archive": bytes([CHUNK_4K_SIZED]) + empty,
        "tar_gz": bytes([CHUNK_4K_UNSIZED]) + gz(plain),
        "tar_xz": bytes([CHUNK_4K_UNSIZED]) + lzma.compress(make_tar(SAMPLES[:3])),
        "tar_bz2": bytes([CHUNK_4K_UNSIZED]) + bz2.compress(make_tar(SAMPLES[:3])),
    }
    c["tar_samples_gz"] = {
        "plain": bytes([CHUNK_4K_UNSIZED, 0]) + plain,
        "pax_cut_4": bytes([CHUNK_7_UNSIZED, 4]) + pax,
        "gnu": bytes([CHUNK_4K_SIZED, 0]) + gnu,
    }
    c["brace"] = {
        "range": b"\x01shard-{000000..000009}.tar",
        "list_nested": b"\x01{a,b{c,d}e}-{x..z}-{10..1..3}",
        "escape": b"\x01a\\{b,c\\}{d,e}",
        "no_escape": b"\x00a\\{b,c}",
        "letters": b"\x01{A..c..5}{-3..3}",
        "unbalanced": b"\x01x{a,b",
    }
    c["url_patterns"] = {
        "env": b"${ROOT}/${SHARDS}::/b/c-{0..2}.tar",
        "s3": b"s3://bucket/train-{0000..0003}.tar::S3://Bucket/x/",
        "listing": b"data/train-*.tar::file:///d/x?[ab].tar::pipe:cat x.tar",
        "self": b"${SELF}",
        "http": b"https://host:8080/p/a-{0..3}.tar?x=1::-",
    }
    c["npy"] = {
        "f4_2x3": npy_bytes("<f4", (2, 3), struct.pack("<6f", 0, 1, 2, 3, 4, 5)),
        "i2_big_fortran": npy_bytes(">i2", (2, 3), struct.pack(">6h", 0, 3, 1, 4, 2, 5), True),
        "bool": npy_bytes("|b1", (3,), b"\x01\x00\x02"),
        "scalar_c16": npy_bytes("<c16", (), struct.pack("<2d", 1, 2)),
        "empty_u8": npy_bytes("|u1", (0, 4), b""),
        "f2": npy_bytes("<f2", (3,), struct.pack("<3e", 0, 1, 2)),
    }
    # Format 2.0 and 3.0: the same header with a 4-byte length (3.0: UTF-8 allowed).
    v1 = c["npy"]["f4_2x3"]
    hlen = int.from_bytes(v1[8:10], "little")
    c["npy"]["v2"] = b"\x93NUMPY\x02\x00" + hlen.to_bytes(4, "little") + v1[10:]
    c["npy"]["v3"] = b"\x93NUMPY\x03\x00" + hlen.to_bytes(4, "little") + v1[10:]
    idx = index_text(plain)
    c["index"] = {
        "v12": idx.encode(),
        "v11": b"v1.1 2\ntxt 512 5 cls 1536 1\njpg 3072 100\n",
        "empty": b"v1.2 0\n",
        # fuzz_index gives the text to the wids JSON reader too.
        "wids": WIDS_INDEX,
    }
    c["indexed_sample"] = {
        "plain": idx.encode() + b"\0" + plain,
        "pax": index_text(pax).encode() + b"\0" + pax,
        "gnu": index_text(gnu).encode() + b"\0" + gnu,
        "v11": b"v1.1 1\ntxt 512 5\n\0" + make_tar([("a.txt", b"hello")]),
    }
    c["s3_xml"] = {
        "list": b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                b"<Name>b</Name><Prefix>train-</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
                b"<NextContinuationToken>tok==</NextContinuationToken>"
                b"<Contents><Key>train-0.tar</Key><Size>10</Size></Contents>"
                b"<Contents><Key>a &amp; b &#x41;&#66;.tar</Key></Contents></ListBucketResult>",
        "list_url": b"<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
                    b"<Contents><Key>a%20b+c.tar</Key></Contents></ListBucketResult>",
        "error": b"<?xml version='1.0'?><Error><Code>NoSuchBucket</Code><Message>The bucket does not exist</Message>"
                 b"<!-- comment --><BucketName>b</BucketName></Error>",
        "upload": b"<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>abc-123</UploadId>"
                  b"</InitiateMultipartUploadResult>",
        "cdata": b"<ListBucketResult><Contents><Key><![CDATA[x<y>.tar]]></Key></Contents></ListBucketResult>",
    }
    c["aws_config"] = {
        "credentials": b"[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = secret\n"
                       b"aws_session_token=tok\n\n[dev]\naws_access_key_id: AKID2\naws_secret_access_key: s2\n",
        "config": b"# comment\n[default]\nregion = eu-west-1\n[profile   dev]\nregion=us-west-2\n"
                  b"s3 =\n  addressing_style = path\n; other\n",
        "half": b"[dev]\naws_access_key_id = only\n[broken\nregion = x\n",
    }
    ext = DECODE_EXTS.index
    c["decode_basic"] = {
        "txt": bytes([ext("txt")]) + "héllo wörld".encode(),
        "cls": bytes([ext("cls")]) + b" 42\n",
        "json": bytes([ext("json")]) + b'{"a": [1, 2.5, null, "x"], "b": {"c": true}}',
        "npy": bytes([ext("npy")]) + c["npy"]["f4_2x3"],
        "txt_gz": bytes([ext("txt.gz")]) + gz(b"compressed text"),
        "npy_xz": bytes([ext("npy.xz")]) + lzma.compress(c["npy"]["i2_big_fortran"]),
        "json_bz2": bytes([ext("json.bz2")]) + bz2.compress(b"[1, 2, 3]"),
        "txt_gz_gz": bytes([ext("txt.gz.gz")]) + gz(gz(b"twice")),
    }
    # fuzz_msgpack_cbor.cpp: selector 0 msgpack, 1 cbor.
    c["msgpack_cbor"] = {
        "mp_xy": b"\x00\x82\xa1x\x00\xa1y\x00",  # {"x": 0, "y": 0}, as mpdata.tar holds
        "mp_mixed": b"\x00\x93\xcb" + struct.pack(">d", 1.5) + b"\xc4\x02ab\x81\xa1k\x92\xff\xc3",
        "mp_deep": b"\x00" + b"\x91" * 600 + b"\x00",
        "cbor_xy": b"\x01\xa2\x61x\x00\x61y\x00",
        "cbor_mixed": b"\x01\x84\xf9\x3e\x00\x43abc\x9f\x01\xff\xbf\x61k\xf6\xff",
    }
    c["tenbin"] = {
        "f8_2x3_i2": tenbin_bytes([("f8", (2, 3), struct.pack("<6d", 0, 1, 2, 3, 4, 5)),
                                   ("i2", (2,), struct.pack("<2h", 7, -8))]),
        "u1_scalar_info": tenbin_bytes([("u1", (), b"\x09")], info=b"label"),
        "f4_empty": tenbin_bytes([("f4", (0, 4), b"")]),
    }
    c["npz"] = {
        "stored": npz_bytes({"x": c["npy"]["f4_2x3"], "y": c["npy"]["bool"]}, zipfile.ZIP_STORED),
        "deflated": npz_bytes({"a": c["npy"]["i2_big_fortran"]}, zipfile.ZIP_DEFLATED),
    }
    return c


def tenbin_bytes(arrays, info=b""):
    """webdataset's tenbin layout: per array a header chunk and a data chunk, each magic,
    int64 length and payload zero-padded to a multiple of 64."""
    def chunk(payload):
        return b"~TenBin~" + struct.pack("<q", len(payload)) + payload + b"\0" * (-len(payload) % 64)

    out = b""
    for code, shape, data in arrays:
        header = code.encode().ljust(8, b"\0") + info.ljust(8, b"\0") + struct.pack("<q", len(shape))
        header += b"".join(struct.pack("<q", d) for d in shape)
        out += chunk(header) + chunk(data)
    return out


def npz_bytes(members, compression):
    """An .npz as np.savez writes it: NAME.npy members of a zip (fixed dates)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), data,
                       compress_type=compression)
    return out.getvalue()


def regressions():
    """Small inputs of the defects of issue #15 and later ones (the large ones: large_regressions)."""
    r = {}
    # 1. An x header whose base-256 size is 2^64-1 in front of a benign index entry's member: the
    # size rounded up to whole blocks wraps to 0 and read_indexed_sample parsed 2^64-1 bytes of
    # pax records.
    shard = (header(b"PaxHeaders/a.txt", base256_size(2**64 - 1), b"x") +
             header(b"a.txt", octal_size(5)) + pad(b"hello") + END)
    r["indexed_sample"] = {"pax_size_2e64_wraps": b"v1.2 1\ntxt 1024 5 a.txt\n\0" + shard}
    # 2. A member claiming 100 GiB (base-256) in a 4.6 KB tar: allocated before reading.
    huge = header(b"a.txt", base256_size(100 << 30)) + bytes(range(256)) * 16
    # 6. A pax path record whose length is wrong ("99" for a shorter record): libarchive warns,
    # and the member got its ustar name instead of the pax one.
    rec = b"99 path=pax/name.txt\n"
    bad_pax = (header(b"PaxHeaders/ustar.txt", octal_size(len(rec)), b"x") + pad(rec) +
               header(b"ustar.txt", octal_size(3)) + pad(b"abc") + END)
    # 7. A .tar.gz missing only its 8-byte gzip trailer: "unknown libarchive error" blaming the
    # start of the archive, and the last member lost.
    targz = gz(make_tar(SAMPLES))
    # 11. A member whose extension is a reserved sample key.
    reserved = make_tar([("x.txt", b"a"), ("x.__key__", b"y")])
    r["tar_samples"] = {
        "member_100gib_sized": bytes([CHUNK_4K_SIZED]) + huge,
        "member_100gib_unsized": bytes([CHUNK_4K_UNSIZED]) + huge,
        "pax_bad_record_length": bytes([CHUNK_512_SIZED]) + bad_pax,
        "targz_no_trailer": bytes([CHUNK_4K_UNSIZED]) + targz[:-8],
        "reserved_extension": bytes([CHUNK_4K_SIZED]) + reserved,
    }
    r["tar_samples_gz"] = {
        "member_100gib": bytes([CHUNK_4K_UNSIZED, 0]) + huge,
        "no_trailer": bytes([CHUNK_4K_UNSIZED, 8]) + make_tar(SAMPLES),
    }
    # 4. Ranges whose expansion would need 32 GB and 3 GB.
    r["brace"] = {
        "range_1e9": b"\x01x{0..999999999}",
        "range_1e8": b"\x01x{0..99999999}",
        "product_1e10": b"\x01{0..99999}{0..99999}",
    }
    # 12. A WAV of 122 channels whose data chunk is empty: no frame reached the format checks,
    # and the decode gave a [122, 0] tensor from the header (found by fuzz_audio in CI).
    fmt = struct.pack("<HHIIHH", 1, 122, 8000, 8000 * 122 * 2, 122 * 2, 16)
    wav = b"RIFF" + struct.pack("<I", 36) + b"WAVEfmt " + struct.pack("<I", 16) + fmt + b"data" + bytes(4)
    r["audio"] = {"wav_122_channels_no_frames": bytes([1]) + wav}
    # 13. A wids index whose relative url resolves to a name like "s-5: a": format_wids_index
    # wrote it relative, and it read back as a URL of scheme "s-5" (found by fuzz_index in CI).
    r["index"] = {"wids_relative_url_like_a_scheme":
                  b'{"__kind__": "wids-shard-index-v1", "wids_version": 1, '
                  b'"shardlist": [{"url": "a/../s-5: a", "nsamples": 3}]}'}
    # 14. An .npz member "a\\b.npy" whose local header says Unix (so libarchive keeps the
    # backslash): write_npz wrote the name back in a header libarchive reads as MS-DOS, and
    # "a\\b" came back as "a/b" (found by fuzz_npz). write_npz refuses such a name now.
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        info = zipfile.ZipInfo("a\\b.npy", date_time=(1980, 1, 1, 0, 0, 0))
        info.reserved = 3  # the version's high byte: made on Unix
        info.create_system = 3
        z.writestr(info, npy_bytes("|u1", (1,), b"\x07"))
    r["npz"] = {"name_with_backslash": out.getvalue()}
    return r


def gzip_of_zeros(mib):
    """gzip -9 of `mib` MiB of zeros, made from one compressed MiB repeated (a full flush resets
    the compressor, so every MiB compresses to the same bytes): a second instead of six."""
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 20)
    block = z.compress(chunk) + z.flush(zlib.Z_FULL_FLUSH)
    again = z.compress(chunk) + z.flush(zlib.Z_FULL_FLUSH)
    assert block == again
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(chunk, crc)
    head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    tail = z.flush() + struct.pack("<II", crc, (mib << 20) & 0xFFFFFFFF)
    return head + block * mib + tail


def large_regressions():
    r = {}
    # 3. 30,000 levels of nested braces overflowed the stack.
    r["brace"] = {"nested_30000": b"\x01" + b"{a," * 30000 + b"b" + b"}" * 30000}
    r["url_patterns"] = {"nested_30000": b"{a," * 30000 + b"b" + b"}" * 30000}
    # 8. An 872 KB a.txt.gz of zeros (about 900 MB decompressed) peaked at 431 MB+.
    r["decode_basic"] = {"txt_gz_zeros_900mb": bytes([DECODE_EXTS.index("txt.gz")]) + gzip_of_zeros(900)}
    return r


def jpeg_seeds():
    """fuzz_jpeg_window's seeds: small JPEGs of each kind the window decode meets, written by
    PIL (Debian's python3-pil) when it is importable; the committed files stay otherwise."""
    try:
        from PIL import Image
    except ImportError:
        return {}
    w, h = 56, 40
    pixels = bytes(v for y in range(h) for x in range(w)
                   for v in ((x * 4) % 256, (y * 6) % 256, 200 if (x // 3 + y // 2) % 2 else 0))
    img = Image.frombytes("RGB", (w, h), pixels)

    def jpeg(im, **kw):
        out = io.BytesIO()
        im.save(out, "JPEG", **kw)
        return out.getvalue()

    return {"jpeg_window": {
        "baseline_420": jpeg(img, quality=75),
        "progressive": jpeg(img, quality=75, progressive=True),
        "444": jpeg(img, quality=75, subsampling=0),
        "422": jpeg(img, quality=75, subsampling=1),
        "grey": jpeg(img.convert("L"), quality=75),
        "large_window": jpeg(img.resize((112, 80)), quality=60),
    }}


def flac_without_padding(data):
    """The FLAC file without its PADDING metadata blocks (ffmpeg writes 8 KiB of them, which
    would take the seed past the fuzzer's -max_len)."""
    pos, blocks = 4, []
    while True:
        kind, size = data[pos], int.from_bytes(data[pos + 1:pos + 4], "big")
        if kind & 0x7F != 1:
            blocks.append(bytes([kind & 0x7F]) + data[pos + 1:pos + 4 + size])
        pos += 4 + size
        if kind & 0x80:
            break
    blocks[-1] = bytes([blocks[-1][0] | 0x80]) + blocks[-1][1:]
    return data[:4] + b"".join(blocks) + data[pos:]


def audio_seeds():
    """fuzz_audio's seeds: a control byte (fuzz_audio.cpp) and a tiny clip. The WAV is written
    here; FLAC, MP3 and Ogg Vorbis by `ffmpeg` when it is installed (the committed files stay
    otherwise)."""
    import math
    import shutil
    import subprocess
    import tempfile
    import wave

    rate, frames = 8000, 400
    pcm = b"".join(int(12000 * math.sin(2 * math.pi * 440 * i / rate)).to_bytes(2, "little", signed=True) * 2
                   for i in range(frames))
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    seeds = {"wav_whole": bytes([1]) + out.getvalue(),
             "wav_mono_16k_window": bytes([1 | 8 | 16 | 64]) + out.getvalue()}
    if shutil.which("ffmpeg"):
        codecs = {"flac": (0, "flac", []), "mp3": (2, "mp3", ["-c:a", "libmp3lame", "-b:a", "32k"]),
                  "ogg": (3, "ogg", ["-c:a", "libvorbis", "-q:a", "0"])}
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "in.wav")
            with open(src, "wb") as f:
                f.write(out.getvalue())
            for name, (ext_index, ext, args) in codecs.items():
                dst = os.path.join(tmp, "out." + ext)
                subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", src, *args,
                                "-map_metadata", "-1", "-fflags", "+bitexact", dst], check=True)
                with open(dst, "rb") as f:
                    clip = f.read()
                if ext == "flac":
                    clip = flac_without_padding(clip)
                seeds[name + "_whole"] = bytes([ext_index]) + clip
                seeds[name + "_random_window"] = bytes([ext_index | 128]) + clip
    return {"audio": seeds}


def riff_without_junk(data):
    """A RIFF file (AVI) without its JUNK chunks, the padding the muxer reserves for an OpenDML
    index (4 KiB of zeros in a clip of 500 bytes): the seed fits libFuzzer's -max_len. idx1's
    offsets count from the movi list, so they stay right."""
    def chunks(b):
        out, off = b"", 0
        while off + 8 <= len(b):
            cid, size = b[off:off + 4], struct.unpack("<I", b[off + 4:off + 8])[0]
            body = b[off + 8:off + 8 + size]
            if cid in (b"RIFF", b"LIST"):
                body = body[:4] + chunks(body[4:])
            if cid != b"JUNK":
                out += cid + struct.pack("<I", len(body)) + body + b"\0" * (len(body) & 1)
            off += 8 + size + (size & 1)
        return out
    return chunks(data)


def video_seeds():
    """fuzz_video's seeds: a control byte (fuzz_video.cpp) and a tiny clip (16x12, 6 frames of
    testsrc2) in each container, written by `ffmpeg` when it is installed (the committed files
    stay otherwise)."""
    import shutil
    import subprocess
    import tempfile

    if not shutil.which("ffmpeg"):
        return {}
    codecs = {"mp4": ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "4"],
              "webm": ["-c:v", "libvpx", "-deadline", "realtime", "-g", "4"],
              "mkv": ["-c:v", "ffv1"],
              "avi": ["-c:v", "mpeg4", "-q:v", "8", "-g", "4"],
              "mov": ["-c:v", "mpeg4", "-q:v", "8", "-g", "4"]}
    seeds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ext, args in codecs.items():
            dst = os.path.join(tmp, "clip." + ext)
            subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                            "testsrc2=size=16x12:rate=10", "-t", "0.6", *args, "-map_metadata", "-1",
                            "-fflags", "+bitexact", dst], check=True)
            with open(dst, "rb") as f:
                clip = f.read()
            if ext == "avi":
                clip = riff_without_junk(clip)
            seeds[ext + "_whole"] = bytes([0]) + clip  # the whole video, its own size
            seeds[ext + "_stride_scaled"] = bytes([1 | 4]) + clip
            seeds[ext + "_fps_random_threads"] = bytes([2 | 8]) + clip
            seeds[ext + "_past_the_end"] = bytes([3]) + clip
    return {"video": seeds}


def write(root, tree):
    for target, files in tree.items():
        d = os.path.join(root, target)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--large", metavar="DIR", help="write only the large regression inputs, under DIR")
    args = p.parse_args()
    if args.large:
        write(args.large, large_regressions())
        return
    write(os.path.join(HERE, "corpus"), corpus())
    write(os.path.join(HERE, "corpus"), jpeg_seeds())
    write(os.path.join(HERE, "corpus"), audio_seeds())
    write(os.path.join(HERE, "corpus"), video_seeds())
    write(os.path.join(HERE, "regressions"), regressions())


if __name__ == "__main__":
    main()
