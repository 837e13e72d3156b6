"""Bounded YAML: sweep files, configs and archives come from other people (docs/sweeps.md).

Before any YAML text reaches OmegaConf or Hydra, :func:`check` reads it as a stream of events
(PyYAML's parser: no object is built, nothing is expanded, memory stays that of one event)
and refuses it, with :class:`~pipeline.errors.ConfigError` naming the file, when

* it is larger than :data:`MAX_BYTES` or not UTF-8 text;
* it would expand to more than :data:`MAX_NODES` nodes or :data:`MAX_CHARS` characters of
  scalars: every alias (``*name``) counts as a full copy of what its anchor (``&name``) names,
  which is what a loader builds, so a "billion laughs" file of a kilobyte is refused at once
  while ordinary anchors (a shared ``params`` block) pass;
* it nests deeper than :data:`MAX_DEPTH`;
* a node carries a tag other than YAML's plain data types (``!!python/...``, ``!!binary``,
  ``!custom``): the text is data, never instructions to build objects;
* with ``interpolations=False`` (sweep files, and configs the pipeline wrote itself, resolved:
  an archive's or a run folder's ``config.yaml``), a scalar holds an OmegaConf interpolation
  ``${...}``, whose resolution could read the environment (``${oc.env:SECRET}`` would put its
  value into the run's config.yaml, MLflow and the archive) or expand without bound; the
  message names the key (``params.lam``, ``axes.d[1]``) and the value.

:func:`load` is ``OmegaConf.load`` after that check (the same loader, on the checked text).
:func:`check_sweep_files` applies the check to the sweep files a command line names
(``+sweep=NAME``, ``-m +sweep=a,b``; also another config group's choice and ``--config-name``)
and to the files their ``defaults`` lists pull in, before Hydra composes them; there no
interpolation is allowed, except in a primary config (``--config-name``: it names Hydra's
folders with ``${now:...}`` as conf/config.yaml does) and in Hydra's own groups (``hydra/...``)
that a primary config pulls in.
"""
from __future__ import annotations

import fnmatch
import io
import stat
from pathlib import Path

import yaml

from pipeline.errors import ConfigError

__all__ = ["MAX_BYTES", "MAX_NODES", "MAX_CHARS", "MAX_DEPTH", "check", "read_text", "load",
           "check_sweep_files"]

#: the largest YAML file read (a sweep or a run's config.yaml is a few kilobytes)
MAX_BYTES = 1 << 20
#: the most nodes (scalars and collections) a file may expand to, aliases expanded
MAX_NODES = 100_000
#: the most characters of scalars a file may expand to, aliases expanded
MAX_CHARS = 16 << 20
#: the deepest nesting of collections
MAX_DEPTH = 64
_PLAIN = "tag:yaml.org,2002:"
#: explicit tags allowed: YAML's plain data types ("!" is the non-specific tag of a quoted scalar)
ALLOWED_TAGS = frozenset({"!"} | {_PLAIN + t for t in ("str", "int", "float", "bool", "null",
                                                        "seq", "map", "merge")})


def _where(event: yaml.Event, name: str) -> str:
    mark = event.start_mark
    return f"{name}, line {mark.line + 1}, column {mark.column + 1}" if mark else name


#: why a config that the pipeline wrote holds no interpolation (the default refusal's reason)
RESOLVED = "a config the pipeline wrote holds resolved values only"
#: why a sweep file may hold none
SWEEP_DATA = ("a sweep file is plain data, never resolved (an interpolation could read the "
              "environment, ${oc.env:...}); write the value itself")


def _key_path(parts: list) -> str:
    """``a.b[2].c`` from the keys and indexes of the open collections."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out


def check(text: str, name: str, *, interpolations: bool = True, max_bytes: int = MAX_BYTES,
          max_nodes: int = MAX_NODES, max_chars: int = MAX_CHARS, max_depth: int = MAX_DEPTH,
          why: str = RESOLVED) -> None:
    """Refuse ``text`` (the file ``name``) as the module doc says; None if it may be loaded.
    ``why`` ends the message refusing an interpolation."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ConfigError(f"{name}: {size} bytes, more than the {max_bytes} a YAML file may have")
    anchors: dict[str, tuple[int, int]] = {}
    # one [nodes, chars, anchor] per open collection; the bottom one counts the whole stream
    stack: list[list] = [[0, 0, None]]
    # the key path of the node at hand (for messages): per open collection [is a mapping,
    # a key comes next, the last key or the next index, its own key or index in its parent]
    where: list[list] = []
    try:
        for event in yaml.parse(io.StringIO(text), Loader=yaml.SafeLoader):
            is_key, own = False, None
            if isinstance(event, yaml.NodeEvent) and where:
                top = where[-1]
                if top[0] and top[1]:  # a mapping's key
                    is_key, top[1] = True, False
                    top[2] = event.value if isinstance(event, yaml.ScalarEvent) else "?"
                elif top[0]:  # a mapping's value
                    top[1], own = True, top[2]
                else:  # a sequence's item
                    own, top[2] = top[2], top[2] + 1
            if isinstance(event, yaml.AliasEvent):
                if event.anchor not in anchors:
                    raise ConfigError(f"{_where(event, name)}: alias *{event.anchor} names no anchor")
                nodes, chars = anchors[event.anchor]
            elif isinstance(event, yaml.NodeEvent):
                tag = getattr(event, "tag", None)
                if tag is not None and tag not in ALLOWED_TAGS:
                    shown = "!!" + tag[len(_PLAIN):] if tag.startswith(_PLAIN) else tag
                    raise ConfigError(f"{_where(event, name)}: the tag {shown!r} is not allowed "
                                      "(YAML here is plain data: strings, numbers, lists, mappings)")
                if isinstance(event, yaml.CollectionStartEvent):
                    mapping = isinstance(event, yaml.MappingStartEvent)
                    where.append([mapping, mapping, None if mapping else 0, own])
                    stack.append([0, 0, event.anchor])
                    if len(stack) - 1 > max_depth:
                        raise ConfigError(f"{_where(event, name)}: nested deeper than {max_depth} levels")
                    continue
                value = event.value
                if not interpolations and "${" in value:
                    parts = [w[3] for w in where[1:]] + ([] if is_key else [own])
                    key = _key_path([x for x in parts if x is not None])
                    what = (f"the key {value[:80]!r}" + (f" under {key}" if key else "") if is_key
                            else f"{key or '(the document)'}={value[:80]!r}")
                    raise ConfigError(f"{_where(event, name)}: {what} is an interpolation; {why}")
                nodes, chars = 1, len(value)
                if event.anchor is not None:
                    anchors[event.anchor] = (nodes, chars)
            elif isinstance(event, yaml.CollectionEndEvent):
                where.pop()
                inner, chars, anchor = stack.pop()
                nodes = inner + 1
                if anchor is not None:
                    anchors[anchor] = (nodes, chars)
            else:  # stream and document events
                continue
            top = stack[-1]
            top[0] += nodes
            top[1] += chars
            if sum(s[0] for s in stack) > max_nodes or sum(s[1] for s in stack) > max_chars:
                raise ConfigError(
                    f"{_where(event, name)}: expands to more than {max_nodes} nodes or {max_chars} "
                    "characters (aliases *name count as copies of their anchor)")
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}, line {mark.line + 1}, column {mark.column + 1}" if mark else name
        raise ConfigError(f"{where}: not valid YAML: {' '.join((exc.problem or str(exc)).split())}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML: {' '.join(str(exc).split())}") from None


def read_text(path: Path | str, name: str | None = None, max_bytes: int = MAX_BYTES) -> str:
    """The text of the regular file ``path``, at most ``max_bytes`` of UTF-8 read."""
    path = Path(path)
    name = name or str(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ConfigError(f"{name}: not a regular file")
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{name}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{name}: more than the {max_bytes} bytes a YAML file may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not text (UTF-8): {exc.reason} at byte {exc.start}") from None


def load(path: Path | str, name: str | None = None, *, interpolations: bool = True, why: str = RESOLVED):
    """``OmegaConf.load(path)`` after :func:`check`; ConfigError (one line) for any refusal."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    name = name or str(path)
    text = read_text(path, name)
    check(text, name, interpolations=interpolations, why=why)
    try:
        return OmegaConf.load(io.StringIO(text))
    except yaml.YAMLError as exc:  # e.g. a duplicate key, or more than one document
        raise ConfigError(f"{name}: not valid YAML: {' '.join(str(exc).split())}") from None
    except (OmegaConfBaseException, ValueError, OSError) as exc:
        raise ConfigError(f"{name}: not a usable config ({' '.join(str(exc).split())})") from None


# ------------------------------------------------------------- sweep files of a command line

#: the most files a command line's sweeps (and their defaults lists) may pull in
MAX_SWEEP_FILES = 200


def _search_dirs(argv: list[str], conf_dir: Path) -> list[Path]:
    """Where Hydra looks for configs: the project's conf/, ``--config-dir``/``-cd`` and
    ``hydra.searchpath=[...]`` entries that are folders (``pkg://`` ones are installed code)."""
    dirs = [Path(conf_dir)]
    for i, word in enumerate(argv):
        for flag in ("--config-dir", "-cd"):
            if word == flag and i + 1 < len(argv):
                dirs.append(Path(argv[i + 1]))
            elif word.startswith(flag + "="):
                dirs.append(Path(word.split("=", 1)[1]))
        if word.lstrip("+~").startswith("hydra.searchpath="):
            for entry in word.split("=", 1)[1].strip("[]").split(","):
                entry = entry.strip().strip("'\"")
                if entry.startswith("file://"):
                    dirs.append(Path(entry[len("file://"):]))
                elif entry and "://" not in entry:
                    dirs.append(Path(entry))
    return list(dict.fromkeys(dirs))


def _chosen(argv: list[str], dirs: list[Path]) -> list[str]:
    """The config files (``group/name``) the command line chooses: every override of ``sweep``
    or of another config group found in ``dirs``, as Hydra's parser reads it (``+sweep=a,b``,
    ``choice(...)``, a list, ``glob(...)`` matched against the files there), and the primary
    config ``--config-name``/``-cn`` names."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob

    parser = None
    paths: list[str] = []
    for i, word in enumerate(argv):
        if word in ("--config-name", "-cn") and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif word.startswith(("--config-name=", "-cn=")):
            paths.append(word.split("=", 1)[1])
        if word.startswith("-") or "=" not in word:
            continue
        parser = parser or OverridesParser.create()
        try:  # one word at a time: flags' values and bad words are Hydra's to refuse
            (override,) = parser.parse_overrides([word])
        except Exception:  # noqa: BLE001  (Hydra's grammar errors)
            continue
        group = override.key_or_group
        if override.is_delete() or not (group == "sweep" or any((d / group).is_dir() for d in dirs)):
            continue
        value = override.value()
        names: list[str] = []
        if isinstance(value, Glob):
            found = {f.stem for d in dirs for f in (d / group).glob("*.yaml")}
            names = [n for n in sorted(found) if any(fnmatch.fnmatchcase(n, g) for g in value.include)
                     and not any(fnmatch.fnmatchcase(n, g) for g in value.exclude)]
        elif override.is_sweep_override():
            names = list(override.sweep_string_iterator())
        elif isinstance(value, list):
            names = [v for v in value if isinstance(v, str)]
        elif isinstance(value, str):
            names = [value]
        paths += [f"{group}/{n}" for n in names]
    return list(dict.fromkeys(paths))


def _defaults(cfg, group: str) -> list[str]:
    """The config paths (``group/name``) a loaded file's ``defaults`` list may name: relative
    to its own group and absolute alike (checking one file too many costs nothing)."""
    out = []
    for item in (cfg.get("defaults") if hasattr(cfg, "get") else None) or []:
        if isinstance(item, str):
            entry = item.split("@")[0].strip()
            if entry == "_self_":
                continue
        elif hasattr(item, "items") and len(item) == 1:
            (k, v), = item.items()
            if not isinstance(v, str):
                continue
            entry = f"{str(k).split()[-1].split('@')[0]}/{v}"
        else:
            continue
        entry = entry.split()[-1]  # "override x", "optional x"
        out.append(entry.lstrip("/"))
        if group and not entry.startswith("/"):
            out.append(f"{group}/{entry}")
    return out


def _primary(argv: list[str]) -> set[str]:
    """The primary configs a command line names (``--config-name``/``-cn``)."""
    names = set()
    for i, word in enumerate(argv):
        if word in ("--config-name", "-cn") and i + 1 < len(argv):
            names.add(argv[i + 1])
        elif word.startswith(("--config-name=", "-cn=")):
            names.add(word.split("=", 1)[1])
    return names


def _hydra_group(path: str) -> bool:
    return path == "hydra" or path.startswith("hydra/")


def check_sweep_files(argv: list[str], conf_dir: Path) -> None:
    """:func:`check` every config file the command line chooses (sweeps above all; see
    :func:`_chosen`), wherever Hydra would look for it, and every file their ``defaults`` lists
    name; ConfigError on the first refusal. No interpolation is allowed in them but in a primary
    config (``--config-name``) and the files of Hydra's own groups that it pulls in."""
    dirs = _search_dirs(argv, conf_dir)
    primary = _primary(argv)
    # (path, whether interpolations are refused in it)
    todo = [(p, p not in primary) for p in _chosen(argv, dirs)]
    seen: set[Path] = set()
    while todo:
        path, strict = todo.pop()
        group = path.rsplit("/", 1)[0] if "/" in path else ""
        for d in dirs:
            f = d / f"{path}.yaml"
            if not f.is_file() or f.resolve() in seen:
                continue
            seen.add(f.resolve())
            if len(seen) > MAX_SWEEP_FILES:
                raise ConfigError(f"the sweeps pull in more than {MAX_SWEEP_FILES} config files")
            cfg = load(f, f"config file {f}", interpolations=not strict, why=SWEEP_DATA)
            todo += [(p, strict or not _hydra_group(p)) for p in _defaults(cfg, group)]
