"""Google's end-of-patch and end-of-availability dates of the prebuilt images a project can name.

The dates are data, ``data/image_dates.csv`` (one row an image, with its source page and the day
it was read), so that one edit updates every command. Google stops patching an image at its end
of patch and refuses it at its end of availability: ``check`` warns about either, while package
mode (``python_package.executor_image_uri``) and a model upload (``model.serving_image``) refuse
an image past its end of availability, naming the newest replacement the table holds. Images the
table does not hold (custom containers) are not dated.
"""

from __future__ import annotations

import csv
import datetime
import io
from dataclasses import dataclass
from functools import cache
from importlib import resources

CUSTOM_CONTAINER = "the custom container (make submit without PACKAGE=1)"
KINDS = {"executor": "training", "prediction": "prediction", "base": "base"}


@dataclass(frozen=True)
class Row:
    role: str  # executor (package mode), prediction (model.serving_image), base (Dockerfile)
    image: str
    framework: str
    framework_version: str
    python: str
    accelerator: str
    end_of_patch: datetime.date | None
    end_of_availability: datetime.date | None
    source: str
    read_on: str
    note: str

    @property
    def name(self) -> str:
        return key(self.image).rsplit("/", 1)[-1]


def today() -> datetime.date:
    """The day the dates are compared with; tests replace it."""
    return datetime.date.today()


def key(image: str) -> str:
    """The image without its registry host and tag: the us-, europe- and asia- copies of an
    image, with or without ``:latest``, are one row."""
    path = image.strip().split("@", 1)[0]
    first, _, rest = path.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        path = rest
    head, _, last = path.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def _date(text: str) -> datetime.date | None:
    return datetime.date.fromisoformat(text) if text.strip() else None


@cache
def rows() -> tuple[Row, ...]:
    text = resources.files("vertex_trainer_tools").joinpath("data/image_dates.csv").read_text()
    found = []
    for raw in csv.DictReader(io.StringIO(text)):
        raw["end_of_patch"] = _date(raw["end_of_patch"])
        raw["end_of_availability"] = _date(raw["end_of_availability"])
        found.append(Row(**raw))
    return tuple(found)


def find(image: str) -> Row | None:
    wanted = key(image)
    return next((row for row in rows() if key(row.image) == wanted), None)


def past(day: datetime.date | None, on: datetime.date) -> bool:
    return day is not None and on > day


def _version(row: Row) -> tuple[int, ...]:
    parts = row.framework_version.split(".")
    return tuple(int(part) for part in parts if part.isdigit())


def family(image: str) -> str:
    """The image's name without its versions: tf-cpu.2-17.py310 and tf-cpu.2-14.py310 are one
    family, the Hugging Face and the TorchServe prediction images two."""
    head, _, name = key(image).rpartition("/")
    return f"{head}/{name.split('.', 1)[0]}"


def newest(
    role: str, framework: str, accelerator: str, on: datetime.date, like: str = ""
) -> Row | None:
    """The newest image of this role, framework and accelerator (and of ``like``'s family)
    still available ``on``."""
    same = [
        row
        for row in rows()
        if (row.role, row.framework, row.accelerator) == (role, framework, accelerator)
        and (not like or family(row.image) == family(like))
        and not past(row.end_of_availability, on)
    ]
    return max(same, key=_version, default=None)


def _instead(row: Row, on: datetime.date, refusing: bool = True) -> str:
    other = newest(row.role, row.framework, row.accelerator, on, like=row.image)
    if other is not None and key(other.image) != key(row.image):
        until = other.end_of_availability or "no published date"
        return f"newest in the table: {other.image} (available until {until})"
    kind = KINDS.get(row.role, row.role)
    if not refusing:  # still served: the newest there is
        return f"the table has no newer {row.framework} {kind} image"
    if row.role == "executor":
        return f"the table has no newer {row.framework} {kind} image: use {CUSTOM_CONTAINER}"
    return f"the table has no newer {row.framework} {kind} image: use a custom container"


def refusal(image: str, on: datetime.date | None = None) -> str:
    """Why ``image`` cannot be used any more ('' while it can, or when the table lacks it)."""
    on = on or today()
    row = find(image) if image else None
    if row is None or not past(row.end_of_availability, on):
        return ""
    return (
        f"{row.name} ({row.framework} {row.framework_version}) reached its end of availability "
        f"on {row.end_of_availability} (Google's table, read {row.read_on}); {_instead(row, on)}"
    )


def warning(image: str, on: datetime.date | None = None) -> str:
    """The end of availability, else the end of patch, that ``image`` is past ('' if none)."""
    on = on or today()
    why = refusal(image, on)
    row = find(image) if image else None
    if why or row is None or not past(row.end_of_patch, on):
        return why
    until = row.end_of_availability or "no published date"
    return (
        f"{row.name} ({row.framework} {row.framework_version}) gets no patches since "
        f"{row.end_of_patch}, available until {until} (Google's table, read {row.read_on}); "
        f"{_instead(row, on, refusing=False)}"
    )


def package_problem(cfg, on: datetime.date | None = None) -> str:
    """Package mode's refusal of ``python_package.executor_image_uri``, one line ('' if none)."""
    field = f"{cfg.path}: python_package.executor_image_uri"
    image = cfg.python_package.executor_image_uri if cfg.python_package else ""
    if not image:
        return (
            f"{field}: empty: no prebuilt training image of Google's is still available for "
            f"this trainer (vertex_trainer_tools/data/image_dates.csv); use {CUSTOM_CONTAINER}"
        )
    why = refusal(image, on)
    return f"{field}: {why}" if why else ""


def serving_problem(cfg, on: datetime.date | None = None) -> str:
    """A model upload's refusal of ``model.serving_image``, one line ('' if none)."""
    why = refusal(cfg.model.serving_image, on)
    return f"{cfg.path}: model.serving_image: {why}" if why else ""


def check_warnings(cfg, on: datetime.date | None = None) -> list[str]:
    """``check``'s warnings: dated images it names, refused only where they are used."""
    lines = []
    if cfg.python_package and cfg.python_package.executor_image_uri:
        why = warning(cfg.python_package.executor_image_uri, on)
        if why:
            lines.append(
                f"{cfg.path}: python_package.executor_image_uri: {why} (used by PACKAGE=1)"
            )
    why = warning(cfg.model.serving_image, on)
    if why:
        lines.append(f"{cfg.path}: model.serving_image: {why} (used by make upload-model)")
    return lines
