#!/usr/bin/env python3
"""An independent reader of platipus checkpoints: the safetensors layout read
with json and struct only (no platipus code, no numpy).

    python3 tests/read_checkpoint.py FILE

Checks the 8-byte header length, the tensors' byte ranges (they must tile
the data exactly) and the FNV-1a checksum in __metadata__ (of the layout, a
zero byte, the metadata, a zero byte and the data; "fnv1a64:", of older
checkpoints, of the data alone), then prints one
JSON object: {"metadata": {...}, "tensors": {name: {"shape": [...],
"values": [...]}}}. Exits with status 1 and a message on anything wrong.
"""
import json
import struct
import sys

SIZES = {"F32": ("f", 4), "F64": ("d", 8)}


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def checksum(metadata, data):
    stored = metadata.get("platipus.checksum", "")
    if stored.startswith("fnv1a64-all:"):
        header = (metadata.get("platipus.layout", "") + "\0" +
                  metadata.get("platipus.metadata", "") + "\0").encode()
        return "fnv1a64-all:" + fnv1a64(header + data)
    return "fnv1a64:" + fnv1a64(data)


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    data = raw[8 + length:]
    metadata = header.pop("__metadata__", {})
    if metadata.get("platipus.checksum") != checksum(metadata, data):
        sys.exit(f"{path}: checksum mismatch")
    tensors, covered = {}, 0
    for name, spec in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = spec["data_offsets"]
        code, size = SIZES[spec["dtype"]]
        count = 1
        for d in spec["shape"]:
            count *= d
        if begin != covered or end - begin != count * size:
            sys.exit(f"{path}: tensor {name} has bad data_offsets {spec['data_offsets']}")
        covered = end
        values = struct.unpack("<%d%s" % (count, code), data[begin:end])
        tensors[name] = {"shape": spec["shape"], "values": list(values)}
    if covered != len(data):
        sys.exit(f"{path}: {len(data) - covered} bytes of data belong to no tensor")
    return {"metadata": metadata, "tensors": tensors}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(json.dumps(read(sys.argv[1])))
