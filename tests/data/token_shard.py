"""Reads the token shards zfcore prepare writes, for the data tests' scripts."""
import array
import struct


def read_shard(path):
    """The documents of a token shard of format version 2, as docs/data.md describes it."""
    data = open(path, "rb").read()
    magic, version, width, count, vocab, documents, flags = struct.unpack_from("<8sIIQQQI", data)
    assert magic == b"ZFTOKENS" and version == 2 and flags == 1, (magic, version, flags)
    ids = array.array("H" if width == 2 else "I")
    ids.frombytes(data[64:64 + count * width])
    mask = data[64 + count * width:64 + count * width + count]
    starts = array.array("Q")
    starts.frombytes(data[64 + count * width + count:])
    bounds = list(starts) + [count]
    return [(list(ids[a:b]), list(mask[a:b])) for a, b in zip(bounds, bounds[1:])]
