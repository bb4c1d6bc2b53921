"""Where an experiment's results go: tables (CSV + markdown), figures (PNG), one JSON of numbers.

Every experiment writes into one output folder through :class:`ExperimentOutput`, so the
layout is the same for all of them:

    OUT/NAME.json            all numbers of the experiment (plus its settings)
    OUT/TABLE.csv, TABLE.md  each table, machine- and human-readable
    OUT/FIGURE.png           each figure
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from deer.platform.extras import MissingExtraError
from deer.platform.files import save_figure, write_json, write_table, write_text
from deer.platform.tables import markdown_table  # noqa: F401 (experiments.report.markdown_table: the one writer)


def distinct_labels(names) -> list[str]:
    """A short label per model name, unique among ``names``: the last path part, or as many trailing
    parts as it takes to tell two apart (``run-a/checkpoint-10`` and ``run-b/checkpoint-10``)."""
    parts = [Path(str(name)).parts or (str(name),) for name in names]
    depth = 1
    while True:
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(set(map(str, names))) or depth >= max(map(len, parts)):
            return labels
        depth += 1


class ExperimentOutput:
    """Writes one experiment's files into ``folder`` and remembers what it wrote."""

    def __init__(self, folder: Path, name: str):
        self.folder = Path(folder)
        self.name = name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.files: list[Path] = []
        self.skipped: dict[str, str] = {}  # figure name -> why it was not drawn

    def table(self, name: str, table: pd.DataFrame, note: str | None = None) -> pd.DataFrame:
        """Write ``name``.csv and ``name``.md (with ``note`` under the markdown table)."""
        csv_path = write_table(self.folder / f"{name}.csv", table)
        markdown = markdown_table(table)
        if note:
            markdown += f"\n{note}\n"
        md_path = self.folder / f"{name}.md"
        write_text(md_path, markdown)
        self.files += [csv_path, md_path]
        return table

    def figure(self, name: str, draw: Callable[[], Any]) -> Path | None:
        """Save ``draw()``'s matplotlib figure as ``name``.png.  Without the plots extra the figure is
        skipped (named in the JSON's ``figures_skipped``, with the install line) and every table and
        number is still written: a run of minutes is not lost to a missing plotting library."""
        try:
            figure = draw()
        except MissingExtraError as error:
            self.skipped[name] = str(error)
            return None
        path = self.folder / f"{name}.png"
        save_figure(path, figure, dpi=120, bbox_inches="tight")
        self.files.append(path)
        return path

    def finish(self, result: dict) -> dict:
        """Write ``result`` as the experiment's JSON and return it with ``out_dir`` added."""
        if self.skipped:
            result["figures_skipped"] = dict(self.skipped)
        self.numbers(result)
        result["out_dir"] = str(self.folder)
        return result

    def numbers(self, payload: dict) -> Path:
        """Write all numbers as ``<experiment name>.json`` (listing the other files too)."""
        path = self.folder / f"{self.name}.json"
        write_json(path, {**payload, "files": sorted(str(p.name) for p in self.files)})
        self.files.append(path)
        return path
