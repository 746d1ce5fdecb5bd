"""MkDocs hooks of the robotrl docs (``hooks:`` in mkdocs.yml).

- Serves the benchmark suite's learning-curve plots (``benchmarks/results/<tier>/plots/*.png``) at the
  same paths in the site, so the generated result pages link them where the suite writes them.
- Expands ``<!-- config: GROUP/NAME.yaml -->`` into that config file, verbatim, as a YAML block
  (the algorithm pages: reference defaults and the deviations their comments record); for an agent config
  (``agent/NAME.yaml``, which writes only its presets) also every ``agent.model`` setting as composed: the
  constructor's defaults included (:func:`robotrl.schema.model_schema`), interpolations as written; and the
  on-policy schedule ``agent.onpolicy`` of the on-policy agents.
- Expands ``<!-- config-reference -->`` into the config reference: every group of
  ``robotrl/configs/``, each option with the first line of its comment, and the top-level configs.

Generated from the files at build time, so the pages cannot drift from the configs.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "robotrl" / "configs"
PLOTS = ("benchmarks/results/full/plots", "benchmarks/results/quick/plots")


def on_files(files, config):
    for rel in PLOTS:
        for png in sorted((ROOT / rel).glob("*.png")):
            uri = f"{rel}/{png.name}"
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files


def _summary(path: Path) -> str:
    """The first comment line of a config file ('' when it starts with none)."""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            return s.lstrip("#").strip().replace("|", "\\|")
        return ""
    return ""


def _block(rel: str) -> str:
    path = CONFIGS / rel
    if not path.is_file():
        raise FileNotFoundError(f"docs: <!-- config: {rel} --> names no file under robotrl/configs/")
    block = f"`robotrl/configs/{rel}`:\n\n```yaml\n{path.read_text().rstrip()}\n```\n"
    if rel.startswith("agent/"):
        block += (f"\n`agent.model` (and the on-policy schedule `agent.onpolicy`) of `agent={path.stem}` as composed "
                  f"(every setting; the defaults are its agent class's constructor's and `OnPolicyConfig`'s):\n\n```yaml\n{_composed_model(path.stem).rstrip()}\n```\n")
    return block


@functools.cache
def _composed_model(agent: str) -> str:
    """``agent.model`` (and ``agent.onpolicy``) of ``robotrl train agent=<agent>`` as YAML (unresolved: ``${..gamma}``
    stays as written)."""
    import yaml
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"agent={agent}"])
    shown = {k: OmegaConf.to_container(cfg.agent[k]) for k in ("model", "onpolicy") if cfg.agent.get(k) is not None}
    return yaml.safe_dump(shown, sort_keys=False, default_flow_style=None, width=120)


def _reference() -> str:
    out = []
    top = sorted(p for p in CONFIGS.glob("*.yaml"))
    for group in sorted(p for p in CONFIGS.iterdir() if p.is_dir() and not p.name.startswith("_")):
        files = sorted(group.rglob("*.yaml"))
        if not files:
            continue
        out += [f"## `{group.name}=`", "", "| option | what (the file's first comment line) |", "|---|---|"]
        for f in files:
            name = f.relative_to(group).with_suffix("").as_posix()
            out.append(f"| `{name}` | {_summary(f)} |")
        out.append("")
    out += ["## Top-level configs", ""]
    for f in top:
        out += [f"### `{f.name}`", "", _block(f.name), ""]
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    markdown = re.sub(r"<!-- config: ([\w./-]+\.yaml) -->", lambda m: _block(m.group(1)), markdown)
    if "<!-- config-reference -->" in markdown:
        markdown = markdown.replace("<!-- config-reference -->", _reference())
    return markdown
