#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, for the tests: checks every record's framing
and both masked CRC-32Cs (crcmod's CRC-32C, not hpctrain's; a table of its own where crcmod is
missing), decodes the few Event fields hpctrain writes from the protobuf wire format, and prints
the events as JSON, one list per file given:

  read_tfevents.py FILE...
  -> [[{"wall_time": .., "step": .., "file_version": ..} | {.., "scalars": {tag: value},
        "texts": {tag: text}}, ...], ...]

Exits 1 naming the file and offset of the first record that does not check.
"""
import json
import struct
import sys


def table_crc32c():
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) by table, for a machine without crcmod
    (a GPU machine's Python): checked against the standard check value before use."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)

    def crc32c(data):
        crc = 0xFFFFFFFF
        for byte in data:
            crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF

    assert crc32c(b"123456789") == 0xE3069283
    return crc32c


try:
    import crcmod.predefined

    crc32c = crcmod.predefined.mkCrcFun("crc-32c")
except ImportError:
    crc32c = table_crc32c()


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(data):
    """(number, wire type, value) of each field of a message."""
    at = 0
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(data, at)
            value, at = data[at:at + length], at + length
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        else:
            raise ValueError("wire type %d" % wire)
        yield number, wire, value


def varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def summary_value(data, event):
    tag, scalar, text, plugin = None, None, None, None
    for number, _, value in fields(data):
        if number == 1:
            tag = value.decode()
        elif number == 2:
            scalar = struct.unpack("<f", value)[0]
        elif number == 8:  # TensorProto: string_val = 8
            text = [v.decode() for n, _, v in fields(value) if n == 8][0]
        elif number == 9:  # SummaryMetadata.plugin_data.plugin_name
            for n, _, pd in fields(value):
                if n == 1:
                    plugin = [v.decode() for m, _, v in fields(pd) if m == 1][0]
    if text is None and scalar is None:  # TensorBoard would drop it (a 0 left out of the oneof)
        raise ValueError("the value %r holds neither simple_value nor tensor" % tag)
    if text is not None:
        assert plugin == "text", plugin
        event.setdefault("texts", {})[tag] = text
    else:
        event.setdefault("scalars", {})[tag] = scalar


def event_of(data):
    event = {"step": 0}
    for number, _, value in fields(data):
        if number == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:
            event["step"] = value
        elif number == 3:
            event["file_version"] = value.decode()
        elif number == 5:
            for n, _, v in fields(value):
                if n == 1:
                    summary_value(v, event)
    return event


def read(path):
    data = open(path, "rb").read()
    at, events = 0, []
    while at < len(data):
        header = data[at:at + 12]
        if len(header) < 12 or struct.unpack("<I", header[8:])[0] != masked(header[:8]):
            sys.exit("%s: the length's CRC at offset %d does not match" % (path, at))
        length = struct.unpack("<Q", header[:8])[0]
        body = data[at + 12:at + 12 + length]
        footer = data[at + 12 + length:at + 16 + length]
        if len(body) < length or len(footer) < 4 or struct.unpack("<I", footer)[0] != masked(body):
            sys.exit("%s: the data's CRC at offset %d does not match" % (path, at))
        events.append(event_of(body))
        at += 16 + length
    return events


if __name__ == "__main__":
    print(json.dumps([read(path) for path in sys.argv[1:]]))
