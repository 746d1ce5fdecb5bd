"""``python -m robotrl.configs``: rewrite ``robotrl/configs/agent_settings.json``, the agent settings table
(:func:`robotrl.schema.settings_table` of :data:`robotrl.configs.AGENTS`), after an agent constructor's settings
changed; ``tests/test_configs.py`` fails until it is rewritten."""

from __future__ import annotations

import json
from pathlib import Path

from robotrl.configs import TABLE, agent_classes
from robotrl.schema import settings_table
from robotrl.files import atomic_write


def _dumps(table: dict) -> str:
    """The table as JSON with one field per line (readable diffs when a constructor changes)."""
    def block(entries: dict, head) -> list[str]:
        out = []
        for i, (name, entry) in enumerate(entries.items()):
            rows = entry["fields"] if isinstance(entry, dict) else entry
            out.append(f"  {json.dumps(name)}: {head(entry)}[")
            out += [f"   {json.dumps(r, ensure_ascii=False)}{',' if j < len(rows) - 1 else ''}" for j, r in enumerate(rows)]
            out.append("  ]" + ("}" if isinstance(entry, dict) else "") + ("," if i < len(entries) - 1 else ""))
        return out

    agents = block(table["agents"], lambda e: f'{{"base": {json.dumps(e["base"])}, "fields": ')
    nodes = block(table["nodes"], lambda e: "")
    return "\n".join(['{"agents": {', *agents, ' },', ' "nodes": {', *nodes, ' }', '}']) + "\n"


def main() -> None:
    """Write the table (atomically) and print its path."""
    path = Path(str(TABLE))
    text = _dumps(settings_table(agent_classes()))
    json.loads(text)  # the one form it is read in
    atomic_write(path, text, mode=0o644)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
