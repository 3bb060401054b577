#!/usr/bin/env python3
"""Writes a GGUF file laid out like a published Gemma 4 file, with random weights, for the memory
and load benchmarks (benches/RESULTS.md): the real tensor names, shapes and ggml types, the real
config values in llama.cpp's `gemma4.*` keys, and a 262,144-entry vocabulary. Nothing in it is a
trained weight: its output is gibberish, and only its sizes matter.

    python3 benches/gguf_layout.py e2b /tmp/gemma4-e2b-layout.gguf
    python3 benches/gguf_layout.py e4b /tmp/gemma4-e4b-layout.gguf
    python3 benches/gguf_layout.py e2b /tmp/gemma4-e2b-5-layers.gguf --layers 5

`--layers N` keeps the first N layers (and N layers' share of the per-layer table): a file small
enough for a slow adapter that still launches E2B's kernels on E2B's shapes, for per-token host
costs (the browser bench) that scale with the layers.

Standard library only (about 20 s and 3.3 / 5.2 GB of disk). The metadata besides the shapes
(tokenizer keys, merges, chat template) is copied from the tiny fixture that gguf-py wrote
(crates/model/fixtures/gemma4-gguf/model.gguf), its vocabulary padded with filler pieces.

Types. Nobody here has seen the files' tensor tables; the types below are inferred, and the
script prints its total beside the published size:
- e2b (`google/gemma-4-E2B-it-qat-q4_0-gguf`, 3,349,516,256 bytes): every matrix Q4_0 (the QAT
  recipe), both embedding tables Q6_K (the per-layer table is reported to be ~1.9 GB of Q6_K),
  `per_layer_model_proj` BF16, norms F32. This gives 3,332.6 MB: 0.5 % under the file.
- e4b (`ggml-org/gemma-4-E4B-it-GGUF` Q4_K_M, 5,335,289,824 bytes): llama.cpp's Q4_K_M recipe:
  matrices Q4_K, `attn_v` and `ffn_down` Q6_K on the layers `use_more_bits` picks, both embedding
  tables Q6_K, `per_layer_model_proj` BF16.
"""

import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The bench bundle carries the fixture beside this script and names it here.
FIXTURE = os.environ.get("HEARTH_GGUF_FIXTURE") or os.path.join(ROOT, "crates/model/fixtures/gemma4-gguf/model.gguf")
ALIGN = 32
VOCAB = 262144
PLE = 256  # hidden_size_per_layer_input

# ggml type ids and (values, bytes) per block.
F32, Q4_0, Q8_0, Q4_K, Q6_K, BF16 = 0, 2, 8, 12, 14, 30
BLOCKS = {F32: (1, 4), Q4_0: (32, 18), Q8_0: (32, 34), Q4_K: (256, 144), Q6_K: (256, 210), BF16: (1, 2)}

SHAPES = {
    # hidden, layers, kv heads, first KV-shared layer, MLP, double-wide MLP on shared layers,
    # sliding layers per full one, published bytes
    "e2b": dict(h=1536, layers=35, kv=1, shared_from=15, inter=6144, double_wide=True, period=5, published=3_349_516_256),
    "e4b": dict(h=2560, layers=42, kv=2, shared_from=24, inter=10240, double_wide=False, period=6, published=5_335_289_824),
}
HEADS, SLIDING_D, FULL_D = 8, 256, 512


# --- reading the fixture's metadata -------------------------------------------------------------

SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_metadata(path):
    data = open(path, "rb").read()
    pos = 4 + 4

    def take(fmt):
        nonlocal pos
        (value,) = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize(fmt)
        return value

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos : pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return (et, [value(et) for _ in range(n)])
        return take(SCALARS[t])

    take("Q")  # tensor count
    count = take("Q")
    metadata = {}
    for _ in range(count):
        key = string()
        t = take("I")
        metadata[key] = (t, value(t))
    return metadata


# --- writing ------------------------------------------------------------------------------------


def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def pack_value(t, v):
    if t == 8:
        return pack_string(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(pack_value(et, x) for x in items)
    return struct.pack("<" + SCALARS[t], v)


def config_metadata(shape, fixture):
    c = SHAPES[shape]
    layers = c["layers"]
    m = {k: v for k, v in fixture.items() if k.startswith("tokenizer.") or k == "general.architecture"}
    m["general.name"] = (8, f"gemma-4-{shape}-layout (random weights)")
    # The vocabulary padded to the real size with pieces no merge reaches.
    tokens = fixture["tokenizer.ggml.tokens"][1][1]
    scores = fixture["tokenizer.ggml.scores"][1][1]
    types = fixture["tokenizer.ggml.token_type"][1][1]
    filler = VOCAB - len(tokens)
    m["tokenizer.ggml.tokens"] = (9, (8, tokens + [f"\u2581filler{i}" for i in range(filler)]))
    m["tokenizer.ggml.scores"] = (9, (6, scores + [0.0] * filler))
    m["tokenizer.ggml.token_type"] = (9, (5, types + [1] * filler))
    sliding = [(i % c["period"]) != c["period"] - 1 for i in range(layers)]
    inter = [c["inter"] * (2 if c["double_wide"] and i >= c["shared_from"] else 1) for i in range(layers)]
    arch = {
        "context_length": (4, 131072),
        "embedding_length": (4, c["h"]),
        "block_count": (4, layers),
        "feed_forward_length": (9, (4, inter)),
        "attention.head_count": (4, HEADS),
        "attention.head_count_kv": (4, c["kv"]),
        "attention.layer_norm_rms_epsilon": (6, 1e-6),
        "rope.freq_base": (6, 1e6),
        "rope.freq_base_swa": (6, 1e4),
        "final_logit_softcapping": (6, 30.0),
        "attention.sliding_window": (4, 512),
        "attention.shared_kv_layers": (4, layers - c["shared_from"]),
        "embedding_length_per_layer_input": (4, PLE),
        "attention.sliding_window_pattern": (9, (7, sliding)),
        "attention.key_length": (4, FULL_D),
        "attention.value_length": (4, FULL_D),
        "attention.key_length_swa": (4, SLIDING_D),
        "attention.value_length_swa": (4, SLIDING_D),
        "rope.dimension_count": (4, FULL_D),
        "rope.dimension_count_swa": (4, SLIDING_D),
    }
    m.update({f"gemma4.{k}": v for k, v in arch.items()})
    return m, sliding


def use_more_bits(i, n):
    """llama.cpp's choice of the layers Q4_K_M keeps at Q6_K for attn_v and ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensors(shape, sliding):
    """(name, ne, type): ne as GGUF writes it, innermost (columns) first."""
    c = SHAPES[shape]
    h, layers = c["h"], c["layers"]
    matrix = Q4_0 if shape == "e2b" else Q4_K
    out = [
        ("token_embd.weight", [h, VOCAB], Q6_K),
        ("per_layer_token_embd.weight", [layers * PLE, VOCAB], Q6_K),
        ("per_layer_model_proj.weight", [h, layers * PLE], BF16),
        ("per_layer_proj_norm.weight", [PLE], F32),
        ("output_norm.weight", [h], F32),
        ("rope_freqs.weight", [FULL_D // 2], F32),
    ]
    for i in range(layers):
        d = SLIDING_D if sliding[i] else FULL_D
        inter = c["inter"] * (2 if c["double_wide"] and i >= c["shared_from"] else 1)
        more = shape == "e4b" and use_more_bits(i, layers)
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", [h], F32),
            (b + "attn_q.weight", [h, HEADS * d], matrix),
            (b + "attn_q_norm.weight", [d], F32),
            (b + "attn_output.weight", [HEADS * d, h], matrix),
            (b + "post_attention_norm.weight", [h], F32),
            (b + "ffn_norm.weight", [h], F32),
            (b + "ffn_gate.weight", [h, inter], matrix),
            (b + "ffn_up.weight", [h, inter], matrix),
            (b + "ffn_down.weight", [inter, h], Q6_K if more else matrix),
            (b + "post_ffw_norm.weight", [h], F32),
            (b + "inp_gate.weight", [h, PLE], matrix),
            (b + "proj.weight", [PLE, h], matrix),
            (b + "post_norm.weight", [h], F32),
            (b + "layer_output_scale.weight", [1], F32),
        ]
        if i < c["shared_from"]:  # KV-shared layers carry no keys or values
            out += [
                (b + "attn_k.weight", [h, c["kv"] * d], matrix),
                (b + "attn_v.weight", [h, c["kv"] * d], Q6_K if more else matrix),
                (b + "attn_k_norm.weight", [d], F32),
            ]
    return out


def nbytes(ne, t):
    values, size = BLOCKS[t]
    count = 1
    for n in ne:
        count *= n
    assert ne[0] % values == 0, (ne, t)
    return count // values * size


# f16/bf16 high bytes that make small positive scales (about 0.002 to 0.03).
SMALL_HALF = bytes(0x18 + (b & 7) for b in range(256))
SMALL_BF16 = bytes(0x3B + (b & 1) for b in range(256))


def random_data(name, ne, t, n):
    """`n` bytes of random blocks whose scales are small finite numbers; norms 1, RoPE factors as
    llama.cpp writes proportional RoPE (1 for the rotated quarter, 1e30 for the rest)."""
    if t == F32:
        count = n // 4
        if name == "rope_freqs.weight":
            return struct.pack(f"<{count}f", *([1.0] * (count // 4) + [1e30] * (count - count // 4)))
        return struct.pack(f"<{count}f", *([1.0] * count))
    data = bytearray(os.urandom(n))
    _, size = BLOCKS[t]
    blocks = n // size
    if t == BF16:
        data[1::2] = os.urandom(n // 2).translate(SMALL_BF16)
    elif t in (Q4_0, Q8_0):
        data[1::size] = os.urandom(blocks).translate(SMALL_HALF)
    elif t == Q4_K:
        data[1::size] = os.urandom(blocks).translate(SMALL_HALF)
        data[3::size] = os.urandom(blocks).translate(SMALL_HALF)
    elif t == Q6_K:
        data[209::size] = os.urandom(blocks).translate(SMALL_HALF)
    return data


def main():
    args = sys.argv[1:]
    layers = None
    if len(args) == 4 and args[2] == "--layers" and args[3].isdigit() and int(args[3]) > 0:
        layers = int(args[3])
        args = args[:2]
    if len(args) != 2 or args[0] not in SHAPES:
        sys.exit(__doc__)
    shape, out_path = args
    if layers is not None and layers < SHAPES[shape]["layers"]:
        c = SHAPES[shape]
        # The first N layers: KV sharing starts where it did, or not at all.
        SHAPES[shape] = dict(c, layers=layers, shared_from=min(c["shared_from"], layers), published=None)
    metadata, sliding = config_metadata(shape, read_metadata(FIXTURE))
    table = tensors(shape, sliding)
    header = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(table), len(metadata)))
    for key, (t, v) in metadata.items():
        header += pack_string(key) + struct.pack("<I", t) + pack_value(t, v)
    offset, layout = 0, []
    for name, ne, t in table:
        header += pack_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        header += struct.pack("<IQ", t, offset)
        layout.append((name, ne, t, offset, nbytes(ne, t)))
        offset = (offset + nbytes(ne, t) + ALIGN - 1) // ALIGN * ALIGN
    header += b"\0" * (-len(header) % ALIGN)
    with open(out_path + ".partial", "wb") as f:
        f.write(header)
        for name, ne, t, start, n in layout:
            f.seek(len(header) + start)
            step = 64 << 20
            _, size = BLOCKS[t]
            step -= step % size
            for at in range(0, n, step):
                f.write(random_data(name, ne, t, min(step, n - at)))
        f.truncate(len(header) + offset)
    os.replace(out_path + ".partial", out_path)
    total = len(header) + offset
    published = SHAPES[shape]["published"]
    if published is None:
        print(f"{out_path}: {total:,} bytes ({len(table)} tensors, the first {SHAPES[shape]['layers']} layers)")
    else:
        print(f"{out_path}: {total:,} bytes ({len(table)} tensors, header {len(header):,} bytes); "
              f"the published file is {published:,} ({100 * (total - published) / published:+.1f} %)")


if __name__ == "__main__":
    main()
