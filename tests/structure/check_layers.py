#!/usr/bin/env python3
"""The core's rooms stand on each other in one order, and stay readable.

1. A folder of core/ includes only folders below it in LAYERS (one known exception).
2. No source of core/ is over 500 lines together with its header.
3. Only core/plugin/ calls into a plugin's entries or tests an ABI version: everything above
   goes through the typed classes of core/plugin/plugin_kinds.hpp.
Exit 1 with every finding, located; 0 when the house is in order.
"""
import os
import re
import sys

LAYERS = ["runtime", "comm", "config", "plugin", "checkpoint", "model", "tokenizer", "data", "params",
          "memory", "update", "report", "engine", "bench", "cli"]
# runtime/ hands the communicator to plugins (Runtime::comm) and sets up NCCL on a GPU.
EXCEPTIONS = {("runtime", "comm")}
MAX_LINES = 500
RAW_PLUGIN = re.compile(r"api<zf_|ZF_ABI_M[A-Z]*_OF\([^)]*\)\s*[<>=!]|ZF_HAS\(|PluginEntry\b")


def main(root):
    core = os.path.join(root, "core")
    findings = []
    sources = {}
    for folder, _, files in os.walk(core):
        for name in files:
            if not name.endswith((".cpp", ".hpp", ".h")):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            room = rel.split(os.sep)[1]
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            sources[rel] = len(lines)
            for number, line in enumerate(lines, 1):
                m = re.match(r'#include "([a-z_]+)/', line)
                if m and m.group(1) != room and m.group(1) in LAYERS and room in LAYERS:
                    other = m.group(1)
                    if LAYERS.index(other) > LAYERS.index(room) and (room, other) not in EXCEPTIONS:
                        findings.append(f"{rel}:{number}: core/{room}/ includes core/{other}/, a room above it")
                if room != "plugin" and RAW_PLUGIN.search(line):
                    findings.append(f"{rel}:{number}: a raw plugin call or ABI test outside core/plugin/: "
                                    f"{line.strip()}")
            if room not in LAYERS and os.path.dirname(rel) != "core":
                findings.append(f"{rel}: core/{room}/ is not in the list of rooms (tests/structure/check_layers.py)")
    for rel, count in sorted(sources.items()):
        if not rel.endswith(".cpp"):
            continue
        header = rel[:-4] + ".hpp"
        total = count + sources.get(header, 0)
        if total > MAX_LINES:
            findings.append(f"{rel}: {total} lines with its header, over {MAX_LINES}: split it by what it does")
    for finding in findings:
        print(finding)
    print(f"{len(sources)} files of core/ read, {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")))
