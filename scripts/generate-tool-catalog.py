#!/usr/bin/env python3
"""Regenerate src/mcp_server_suite/tools/catalog.json from the tools' models and texts.

Run it after changing a tool's title, description or models; the test suite fails until the
committed catalog matches what this writes. With --check it only compares.
"""

import argparse
import sys

from mcp_server_suite.tools.catalog import CATALOG_FILE, generate_catalog


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    options = parser.parse_args()
    text = generate_catalog()
    if options.check:
        if CATALOG_FILE.read_text(encoding="utf-8") != text:
            print(
                f"{CATALOG_FILE.name} is stale: run scripts/generate-tool-catalog.py",
                file=sys.stderr,
            )
            return 1
        return 0
    CATALOG_FILE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
