#!/usr/bin/env python3
"""Regenerate tests/vectors/jcs.json: RFC 8785 canonical forms computed by ECMAScript itself.

JCS is defined in terms of ECMAScript's `JSON.stringify` and `Number.prototype.toString`, so
Node.js is the reference: this script makes seeded random inputs (doubles by their bit
patterns, and JSON documents with awkward strings, member names and numbers), asks `node` for
the canonical form of each, and writes the pairs. The audit trail's canonicalisation is tested
against them (tests/unit/test_audit_record.py).

Usage: scripts/generate-jcs-vectors.py [--seed N] [--numbers N] [--documents N]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

OUTPUT: Final = Path(__file__).resolve().parents[1] / "tests" / "vectors" / "jcs.json"

# Integers JSON.parse reads exactly: beyond this, ECMAScript rounds them to a double, which the
# audit trail deliberately does not (see audit/record.py, rule 4).
MAX_SAFE_INTEGER: Final = 2**53 - 1

# Characters that exercise every escaping and ordering rule of JCS: the two-letter escapes,
# other controls, quote and backslash, DEL and C1 controls (not escaped), the line and
# paragraph separators, a BMP character above the surrogates, and characters outside the BMP,
# which sort by their UTF-16 surrogates.
_AWKWARD: Final = [
    *'\b\t\n\f\r\x00\x01\x1f"\\/',
    "\x7f",
    "\x80",
    "\u2028",
    "\u2029",
    "\u20ac",
    "\ufb33",
    "\uffff",
    "\U0001f600",
    "\U00010000",
    *"aAzZ09 _-",
    "\u00f6",
]

_NODE: Final = r"""
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
function canon(v) {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return "[" + v.map(canon).join(",") + "]";
  const members = Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canon(v[k]));
  return "{" + members.join(",") + "}";
}
const numbers = input.numbers.map((hex) => [hex, String(Buffer.from(hex, "hex").readDoubleLE(0))]);
const documents = input.documents.map((text) => [text, canon(JSON.parse(text))]);
process.stdout.write(JSON.stringify({ numbers, documents }));
"""


def random_double(rng: random.Random) -> float:
    choice = rng.random()
    if choice < 0.4:
        while True:
            value: float = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if math.isfinite(value):
                return value
    if choice < 0.7:
        return rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-30, 30)
    return rng.randint(-(10**7), 10**7) / 10.0 ** rng.randint(0, 25)


def random_string(rng: random.Random) -> str:
    return "".join(rng.choice(_AWKWARD) for _ in range(rng.randint(0, 6)))


def random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randint(0, 7 if depth < 3 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    if kind == 2:
        return rng.randint(-1000, 1000)
    if kind == 3:
        return random_double(rng)
    if kind in (4, 5):
        return random_string(rng)
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {random_string(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


# The examples of RFC 8785 itself (section 3.2.2 and appendix B), as JSON text.
RFC_DOCUMENTS: Final = [
    '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
    ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
    ' "literals": [null, true, false]}',
    '{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With'
    ' Dagesh", "1": "One", "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control",'
    ' "\\u00f6": "Latin Small Letter O With Diaeresis"}',
]
# Appendix B's doubles, by their IEEE 754 bit patterns (big-endian hex, as the RFC writes them).
RFC_NUMBERS: Final = [
    "0000000000000000",
    "8000000000000000",
    "0000000000000001",
    "8000000000000001",
    "7fefffffffffffff",
    "ffefffffffffffff",
    "4340000000000000",
    "c340000000000000",
    "4430000000000000",
    "44b52d02c7e14af5",
    "44b52d02c7e14af6",
    "44b52d02c7e14af7",
    "444b1ae4d6e2ef4e",
    "444b1ae4d6e2ef4f",
    "444b1ae4d6e2ef50",
    "3eb0c6f7a0b5ed8c",
    "3eb0c6f7a0b5ed8d",
    "41b3de4355555553",
    "41b3de4355555554",
    "41b3de4355555555",
    "41b3de4355555556",
    "41b3de4355555557",
    "becbf647612f3696",
    "43143ff3c1cb0959",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=8785)
    parser.add_argument("--numbers", type=int, default=1500)
    parser.add_argument("--documents", type=int, default=300)
    options = parser.parse_args()
    rng = random.Random(options.seed)  # noqa: S311  # Seeded on purpose: reproducible vectors.
    # Little-endian hex from here on, as Node's readDoubleLE reads it.
    numbers = [bytes.fromhex(bits)[::-1].hex() for bits in RFC_NUMBERS] + [
        struct.pack("<d", random_double(rng)).hex() for _ in range(options.numbers)
    ]
    documents = RFC_DOCUMENTS + [json.dumps(random_value(rng, 0)) for _ in range(options.documents)]
    done = subprocess.run(
        ["node", "-e", _NODE],
        input=json.dumps({"numbers": numbers, "documents": documents}),
        capture_output=True,
        text=True,
        check=True,
    )
    vectors = json.loads(done.stdout)
    vectors["generated_by"] = (
        f"scripts/generate-jcs-vectors.py --seed {options.seed} --numbers {options.numbers} "
        f"--documents {options.documents}"
    )
    OUTPUT.write_text(json.dumps(vectors, indent=0, ensure_ascii=True) + "\n", encoding="utf-8")
    print(f"wrote {len(vectors['numbers'])} numbers and {len(vectors['documents'])} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
