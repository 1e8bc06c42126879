#!/usr/bin/env python3
"""Every Catch2 test name is one ctest test: ctest's test list splits names at ';' (a CMake list),
so a name holding one becomes two tests that each match nothing and fail. Lists such names."""
import glob
import os
import re
import sys

NAME = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')


def main(root):
    findings = []
    for path in sorted(glob.glob(os.path.join(root, "tests", "**", "*.cpp"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for match in NAME.finditer(text):
            name = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1)))
            if ";" in name:
                line = text.count("\n", 0, match.start()) + 1
                findings.append(f"{os.path.relpath(path, root)}:{line}: a test name with ';', which ctest splits: {name}")
    for finding in findings:
        print(finding)
    print(f"{len(findings)} test name(s) with ';'")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
