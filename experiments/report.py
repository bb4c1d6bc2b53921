"""Where an experiment's results go (:class:`ExperimentOutput`): OUT/NAME.json (all numbers and settings),
OUT/TABLE.csv and TABLE.md per table, OUT/FIGURE.png per figure."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from deer.base.extras import MissingExtraError
from deer.base.files import save_figure, write_json, write_table, write_text
from deer.platform.tables import markdown_table  # noqa: F401 (experiments.report.markdown_table: the one writer)


def distinct_labels(names) -> list[str]:
    """A short label per model name, unique among ``names``: the last path part, or as many trailing
    parts as it takes to tell two apart (``run-a/checkpoint-10`` and ``run-b/checkpoint-10``)."""
    parts = [Path(str(name)).parts or (str(name),) for name in names]
    for depth in itertools.count(1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(set(map(str, names))) or depth >= max(map(len, parts)):
            return labels


class ExperimentOutput:
    """Writes one experiment's files into ``folder`` and remembers what it wrote."""

    def __init__(self, folder: Path, name: str):
        self.folder = Path(folder)
        self.name = name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.files: list[Path] = []
        self.skipped: dict[str, str] = {}  # figure name -> why it was not drawn

    def table(self, name: str, table: pd.DataFrame, note: str | None = None) -> None:
        """Write ``name``.csv and ``name``.md (with ``note`` under the markdown table)."""
        md_path = self.folder / f"{name}.md"
        self.files += [write_table(self.folder / f"{name}.csv", table), md_path]
        write_text(md_path, markdown_table(table) + (f"\n{note}\n" if note else ""))

    def figure(self, name: str, draw: Callable[[], Any]) -> None:
        """Save ``draw()``'s figure as ``name``.png; without the plots extra it is skipped (``figures_skipped``)."""
        try:
            figure = draw()
        except MissingExtraError as error:
            self.skipped[name] = str(error)
            return
        path = self.folder / f"{name}.png"
        save_figure(path, figure, dpi=120, bbox_inches="tight")
        self.files.append(path)

    def finish(self, result: dict) -> dict:
        """Write ``result`` as ``<experiment name>.json`` (listing the other files) and return it with ``out_dir``."""
        if self.skipped:
            result["figures_skipped"] = dict(self.skipped)
        path = self.folder / f"{self.name}.json"
        names = sorted(p.name for p in self.files)
        # An earlier run's files that this one did not write are stale: removed.
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
            for name in set(json.loads(path.read_text()).get("files", [])) - set(names):
                (self.folder / Path(name).name).unlink(missing_ok=True)
        write_json(path, {**result, "files": names})
        self.files.append(path)
        result["out_dir"] = str(self.folder)
        return result
