"""Writes DIR/X.npy (uint8 [SAMPLES, FEATURES], random) and DIR/y.npy (int64 [SAMPLES], labels 0-9)
for `hpctrain prepare npy`, without numpy: the .npy format is a short header and the raw array.
   write_npy.py DIR SAMPLES FEATURES"""
import array
import os
import random
import struct
import sys


def save(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"  # the data starts 64-byte aligned
    with open(path, "wb") as out:
        out.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        out.write(data)


def main():
    directory, samples, features = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(0)
    block = rng.randbytes(1 << 20)  # repeated: random enough for a size test, and quick
    size = samples * features
    save(os.path.join(directory, "X.npy"), "|u1", (samples, features), (block * (size // len(block) + 1))[:size])
    labels = array.array("q", (rng.randrange(10) for _ in range(samples)))
    save(os.path.join(directory, "y.npy"), "<i8", (samples,), labels.tobytes())


if __name__ == "__main__":
    main()
