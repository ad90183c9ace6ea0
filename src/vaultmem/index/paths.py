"""The path policy: which vault files are notes to index, by folder and extension.

Pure and cheap (no content, no I/O): include / exclude folders match whole path components and
extensions are case-insensitive. Its verdicts are values (`ExclusionCode`) with a sentence for
people; `triage` branches on the code, never on the wording.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Settings


class ExclusionCode(StrEnum):
    """Why a path is not a note to index."""

    NOT_VAULT_RELATIVE = "not-vault-relative"
    EXCLUDED_FOLDER = "excluded-folder"
    OUTSIDE_INCLUDE = "outside-include"
    NOT_A_NOTE = "not-a-note"


def storable(path: str) -> bool:
    """True if `path` can be stored and printed as text: a file name that is not valid UTF-8
    (decoded by git as lone surrogates) cannot be a PostgreSQL key nor JSON."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def display_path(path: str) -> str:
    """`path` as text anyone can print: bytes that are not UTF-8 shown as `\\xe9`."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class PathExclusion:
    code: ExclusionCode
    reason: str  # a plain sentence for people ("excluded folder Archive")


def _folder_parts(folder: str) -> tuple[str, ...]:
    """`"./01_Projects/AI/"` -> `("01_Projects", "AI")`; backslashes from Windows configs too."""
    return tuple(
        p for p in PurePosixPath(folder.replace("\\", "/")).parts if p not in ("", ".", "/")
    )


def _has_prefix(parts: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return bool(prefix) and parts[: len(prefix)] == prefix


@dataclass(frozen=True)
class PathPolicy:
    """Include / exclude folders and note extensions, matched on whole path components.

    `Archive` excludes `Archive/x.md` but never `MyArchive/x.md`; `01_Projects/AI` includes
    `01_Projects/AI/a.md` and not `01_Projects/AIML/a.md`. Folder matching is case-sensitive
    (git paths are); extensions are not.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = (".obsidian", ".trash", ".git")
    extensions: tuple[str, ...] = (".md", ".markdown")
    _include: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)
    _exclude: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)
    _extensions: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "_include", tuple(p for p in map(_folder_parts, self.include) if p))
        set_(self, "_exclude", tuple(p for p in map(_folder_parts, self.exclude) if p))
        set_(
            self,
            "_extensions",
            frozenset(
                e.lower() if e.startswith(".") else "." + e.lower()
                for e in (x.strip() for x in self.extensions)
                if e
            ),
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> PathPolicy:
        return cls(
            include=tuple(settings.include),
            exclude=tuple(settings.exclude),
            extensions=tuple(settings.extensions),
        )

    def check(self, path: str) -> PathExclusion | None:
        """None if `path` (vault-relative, `/`-separated) is a note to index, else why not."""
        parts = _folder_parts(path)
        if not parts or ".." in parts or path.startswith("/"):
            return PathExclusion(
                ExclusionCode.NOT_VAULT_RELATIVE, f"not a vault-relative path ({path!r})"
            )
        for prefix in self._exclude:
            if _has_prefix(parts, prefix):
                return PathExclusion(
                    ExclusionCode.EXCLUDED_FOLDER, f"excluded folder {'/'.join(prefix)}"
                )
        if self._include and not any(_has_prefix(parts, p) for p in self._include):
            return PathExclusion(
                ExclusionCode.OUTSIDE_INCLUDE,
                "outside the included folders ("
                + ", ".join("/".join(p) for p in self._include)
                + ")",
            )
        suffix = PurePosixPath(parts[-1]).suffix.lower()
        if suffix not in self._extensions:
            return PathExclusion(
                ExclusionCode.NOT_A_NOTE,
                f"not a note ({suffix})" if suffix else "not a note (no extension)",
            )
        return None
