#!/usr/bin/env python3
"""Converts a checkpoint of the format before safetensors ("platipus-checkpoint 1")
into the safetensors checkpoint platipus reads now (include/platipus/io/checkpoint.hpp).

    python3 scripts/convert_checkpoint.py OLD.bin NEW.safetensors

Standard library only. The values are copied byte for byte.
"""
import json
import os
import struct
import sys
import tempfile

OLD_MAGIC = b"platipus-checkpoint 1\n"


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def convert(old_path, new_path):
    with open(old_path, "rb") as f:
        raw = f.read()
    if not raw.startswith(OLD_MAGIC):
        sys.exit(f"{old_path}: not a checkpoint of the old format")
    line_end = raw.index(b"\n", len(OLD_MAGIC))
    length = int(raw[len(OLD_MAGIC):line_end])
    header = json.loads(raw[line_end + 1:line_end + 1 + length])
    data = raw[line_end + 1 + length:]
    dtype, size = {"float32": ("F32", 4), "float64": ("F64", 8)}[header["dtype"]]
    out_header, out_data, offset = {}, bytearray(), 0
    for t in header["tensors"]:
        count = 1
        for d in t["shape"]:
            count *= d
        chunk = data[t["offset"]:t["offset"] + count * size]
        if len(chunk) != count * size:
            sys.exit(f"{old_path}: tensor {t['name']} runs past the end of the file")
        out_header[t["name"]] = {"dtype": dtype, "shape": t["shape"],
                                 "data_offsets": [offset, offset + len(chunk)]}
        out_data += chunk
        offset += len(chunk)
    layout = json.dumps(header["layout"], separators=(",", ":"))
    metadata = json.dumps(header.get("metadata", {}), separators=(",", ":"))
    # The checksum covers the layout, a zero byte, the metadata, a zero byte and the data.
    whole = (layout + "\0" + metadata + "\0").encode() + out_data
    out_header = {"__metadata__": {
        "platipus.layout": layout,
        "platipus.metadata": metadata,
        "platipus.checksum": "fnv1a64-all:" + fnv1a64(whole)}, **out_header}
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    directory = os.path.dirname(os.path.abspath(new_path))
    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as f:
        f.write(struct.pack("<Q", len(text)) + text + out_data)
        temporary = f.name
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)
    os.replace(temporary, new_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    convert(sys.argv[1], sys.argv[2])
