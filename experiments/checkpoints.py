"""A series of checkpoints to screen: a Trainer output folder (``checkpoint-<step>`` folders and the
final model), or names with revisions (``EleutherAI/pythia-160m@step1000``); each gets a label and,
where it can be read, its training step."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from deer.platform.read_back import StoredFileError, read_json_object

CHECKPOINT_FOLDER = re.compile(r"^checkpoint-(\d+)$")
STEP_IN_REVISION = re.compile(r"(?:^|[^a-z])(?:step|ckpt|checkpoint|iter)[-_]?(\d+)$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One model of a series: ``model`` is what the loader takes (folder, or hub id[@revision])."""

    label: str
    model: str
    step: int | None


def _final_step(folder: Path) -> int | None:
    try:
        return int(read_json_object(folder / "trainer_state.json")["global_step"])
    except (StoredFileError, ValueError, KeyError, TypeError):
        return None


def trainer_checkpoints(folder: str | Path) -> list[Checkpoint]:
    """The ``checkpoint-<step>`` folders of a Trainer output folder, by step, then the folder's
    own final model when it has one (its step from ``trainer_state.json`` where present)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such checkpoint folder")
    found = []
    for child in folder.iterdir():
        match = CHECKPOINT_FOLDER.match(child.name)
        if match and child.is_dir():
            if not (child / "config.json").is_file():
                raise FileNotFoundError(f"{child}: a checkpoint folder without config.json (an unfinished save?)")
            found.append(Checkpoint(child.name, str(child), int(match.group(1))))
    found.sort(key=lambda c: c.step)
    if (folder / "config.json").is_file():
        step = _final_step(folder)
        if not any(c.step == step for c in found):  # the last checkpoint is often the final model again
            found.append(Checkpoint(f"{folder.name} (final)", str(folder), step))
    if not found:
        raise FileNotFoundError(f"{folder}: no checkpoint-<step> folders and no model (config.json) in it")
    return found


def named_checkpoints(names: Sequence[str]) -> list[Checkpoint]:
    """Checkpoints given by name, in the order given: folders (step from a ``checkpoint-<step>`` name or their
    trainer_state.json) or hub ids with an ``@revision`` (step from a revision such as ``step1000``)."""
    series = []
    for name in names:
        path = Path(name).expanduser()
        if path.is_dir():
            match = CHECKPOINT_FOLDER.match(path.name)
            series.append(Checkpoint(path.name, name, int(match.group(1)) if match else _final_step(path)))
            continue
        match = STEP_IN_REVISION.search(name.partition("@")[2])  # the step in an @revision
        series.append(Checkpoint(name, name, int(match.group(1)) if match else None))
    return series
