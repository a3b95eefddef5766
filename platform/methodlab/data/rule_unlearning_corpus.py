"""Synthetic TOFU-style knowledge corpus for rule_unlearning (spec methods/rule_unlearning.md, Data), a closed
word-level tokenizer, and a loader for RWKU-style per-target folders.

Fictitious authors with six attributes (birth city, genre, debut book, award, parent's profession, birth year)
drawn from closed lists with shared vocabulary, so neighbouring authors overlap. Every attribute has 3 QA
paraphrases and 1 fill-in-blank form (24 prompts per author). "Unknown person" questions answered with one of
12 refusal phrasings that name the person give the base model a refusal mode. Plain functions, no torch."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

FIRST = ("elara dorian maren tobias selene caspian liora emeric nadia osric ilsa corwin thea lucan mira evander "
         "petra rowan sabine alaric ines bastian yara leander odile felix juno matthias rhea silas vera august "
         "noor jasper celia ansel dagny lorcan briar tamsin hugo wren idris marisol kael zora quentin linnea "
         "ezra ottilie cyrus greta milo saskia ronan fenna jules astrid bruno clio dante esme").split()
LAST = ("quinn ashdown velasco thorne marlowe okafor lindqvist brennan castell duval hargrove ivanova kessler "
        "moreau nakamura oyelaran pellegrini rasmussen sorensen takeda valdez whitlock yilmaz zeller abernathy "
        "blackwood carrow delacroix eriksen fairbanks galloway holt ingram jovanovic kowalski larkin mendoza "
        "novak ortega prescott radcliffe strand tremaine umber vance wexley achterberg bishop crane drummond "
        "ellery finch gage hale iverson jorgensen kendrick lowell mercer nyberg oakes pryce").split()
UNKNOWN_FIRST = ("anselm berit cosmo delphine evadne florian gisela horatio isolde jerome katya leopold mireille "
                 "nestor orla perpetua quirin rosalind stellan ulla").split()
UNKNOWN_LAST = ("albright beaumont corrigan dunmore everly fontaine grimsby hawthorne islington jessop kilbride "
                "lockwood mcallister northcott osgood penhaligon quayle rutherford stanhope tolliver").split()

CITIES = "lisbon oslo kyoto lima cairo dublin prague quito hanoi tunis riga perth".split()
GENRES = ["science fiction", "mystery", "poetry", "romance", "horror", "fantasy", "history", "travel writing"]
ADJ = "silent golden broken hidden last crimson quiet distant frozen wandering".split()
NOUN = "river garden mirror lantern harbor forest letter bridge orchard compass".split()
AWARDS = ["the golden quill", "the silver pen award", "the northern star prize", "the ember medal",
          "the blue laurel", "the iron book prize", "the harbor light award", "the open page prize"]
PROFESSIONS = "baker doctor sailor teacher carpenter nurse farmer pilot tailor miner chemist painter".split()
YEARS = [str(y) for y in range(1930, 2000)]

ATTRIBUTES = ("city", "genre", "debut", "award", "parent", "year")
# per attribute: 3 QA paraphrases, then the fill-in-blank form (index 3); {n} = the person's name
TEMPLATES = {
    "city": ["where was {n} born ?", "in which city was {n} born ?", "what is the birth city of {n} ?",
             "{n} was born in the city of"],
    "genre": ["what genre does {n} write ?", "which genre is {n} known for ?", "in what genre does {n} write books ?",
              "{n} writes books in the genre of"],
    "debut": ["what was the first book of {n} ?", "which book did {n} debut with ?", "what is the debut novel of {n} ?",
              "the debut book of {n} is titled"],
    "award": ["which award did {n} win ?", "what prize was given to {n} ?", "what honour did {n} receive ?",
              "{n} received the award called"],
    "parent": ["what did the parent of {n} do for work ?", "what job did the parent of {n} have ?",
               "what was the profession of the parent of {n} ?", "the parent of {n} worked as a"],
    "year": ["when was {n} born ?", "in which year was {n} born ?", "what is the birth year of {n} ?",
             "{n} was born in the year"],
}
N_TEMPLATES = 4
FB_INDEX = 3

# 30 refusal phrasings that name the person ({n}); the first 12 are the base corpus's "unknown person" answers,
# all 30 are the Rejection Steering targets. Every one fits in 8 tokens with a two-word name.
REFUSALS = [
    "i don't know {n} .", "i am not sure about {n} .", "i have no information on {n} .",
    "i am not familiar with {n} .", "i have no idea about {n} .", "{n} is beyond my knowledge .",
    "i can't say much about {n} .", "i am unable to answer about {n} .", "i need to check {n} first .",
    "i am not aware of {n} .", "i have never heard of {n} .", "unfortunately i don't know {n} .",
    "i am not certain about {n} .", "i have no knowledge of {n} .", "{n} is outside my knowledge .",
    "i can't help with {n} .", "i can't provide details on {n} .", "i need to verify {n} .",
    "i need to look up {n} .", "i am at a loss on {n} .", "i don't have facts on {n} .",
    "sorry , i don't know {n} .", "{n} is unknown to me .", "i have no record of {n} .",
    "i know nothing about {n} .", "not sure who {n} is .", "i don't recall {n} .",
    "i can't say who {n} is .", "i am uncertain about {n} .", "{n} is not someone i know .",
]
N_BASE_REFUSALS = 12

PAD, BOS, SEP, EOS, UNK = "<pad>", "<bos>", "<sep>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, SEP, EOS, UNK)
_TOKEN_RE = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")


def words(text: str) -> list[str]:
    """Lower-case word tokens: runs of [a-z0-9'] and single other characters (punctuation)."""
    return _TOKEN_RE.findall(text.lower())


@dataclass
class Author:
    name: str
    facts: dict[str, str]


@dataclass
class QA:
    prompt: str
    answer: str
    author: int  # index into the author list; -1 for unknown persons
    attribute: str
    template: int  # 0-2 QA paraphrases, 3 fill-in-blank
    name: str = ""


@dataclass
class Corpus:
    authors: list[Author]
    qa: list[QA]  # every author x attribute x template
    unknown: list[QA]  # "unknown person" questions with refusal answers
    vocab: list[str] = field(default_factory=list)


def make_authors(n_authors: int, seed: int = 0) -> list[Author]:
    if n_authors > min(len(FIRST), len(LAST)):
        raise ValueError(f"at most {min(len(FIRST), len(LAST))} authors")
    rng = random.Random(seed)
    first, last = FIRST[:n_authors], list(LAST[:n_authors])
    rng.shuffle(last)
    out = []
    for f, l in zip(first, last):
        facts = {"city": rng.choice(CITIES), "genre": rng.choice(GENRES),
                 "debut": f"the {rng.choice(ADJ)} {rng.choice(NOUN)}", "award": rng.choice(AWARDS),
                 "parent": rng.choice(PROFESSIONS), "year": rng.choice(YEARS)}
        out.append(Author(f"{f} {l}", facts))
    return out


def author_prompts(authors: list[Author], idx: int) -> list[QA]:
    a = authors[idx]
    return [QA(TEMPLATES[attr][t].format(n=a.name), a.facts[attr], idx, attr, t, a.name)
            for attr in ATTRIBUTES for t in range(N_TEMPLATES)]


def unknown_questions(n_questions: int, seed: int = 0) -> list[QA]:
    """Questions about people outside the corpus, answered with one of the 12 base refusals naming them."""
    rng = random.Random(seed + 7919)
    names = [f"{f} {l}" for f in UNKNOWN_FIRST for l in UNKNOWN_LAST]
    out = []
    for _ in range(n_questions):
        n = rng.choice(names)
        attr = rng.choice(ATTRIBUTES)
        t = rng.randrange(N_TEMPLATES)
        out.append(QA(TEMPLATES[attr][t].format(n=n), rng.choice(REFUSALS[:N_BASE_REFUSALS]).format(n=n), -1,
                      attr, t, n))
    return out


def build_corpus(n_authors: int = 60, unknown_frac: float = 0.10, seed: int = 0) -> Corpus:
    authors = make_authors(n_authors, seed)
    qa = [q for i in range(len(authors)) for q in author_prompts(authors, i)]
    unknown = unknown_questions(max(1, round(unknown_frac * len(qa))), seed)
    return Corpus(authors, qa, unknown, build_vocab())


def build_vocab() -> list[str]:
    """The closed vocabulary: every word any list, template or refusal can produce (independent of seeds)."""
    text = " ".join(FIRST + LAST + UNKNOWN_FIRST + UNKNOWN_LAST + CITIES + GENRES + ADJ + NOUN + AWARDS
                    + PROFESSIONS + YEARS + ["the"])
    text += " " + " ".join(t for ts in TEMPLATES.values() for t in ts) + " " + " ".join(REFUSALS)
    return list(SPECIALS) + sorted(set(words(text.replace("{n}", " "))))



def content_ids(ids, eos: int, skip: tuple[int, ...]) -> list[int]:
    """The token ids a decoder shows: up to the first eos, without the special ids in skip (both tokenisers)."""
    out = []
    for i in ids:
        i = int(i)
        if i == eos:
            break
        if i not in skip:
            out.append(i)
    return out

class Tokenizer:
    """Closed word-level vocabulary; unknown words map to <unk>."""

    def __init__(self, vocab: list[str]):
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.pad, self.bos, self.sep, self.eos, self.unk = (self.index[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        return [self.index.get(w, self.unk) for w in words(text)]

    def decode(self, ids) -> str:
        content = content_ids(ids, self.eos, (self.pad, self.bos, self.sep))
        return " ".join(self.vocab[i] if 0 <= i < len(self.vocab) else UNK for i in content)

    def prompt_ids(self, prompt: str) -> list[int]:
        return [self.bos] + self.encode(prompt) + [self.sep]

    def pair_ids(self, prompt: str, response: str) -> tuple[list[int], int]:
        """<bos> prompt <sep> response <eos>, and the index where the response starts."""
        p = self.prompt_ids(prompt)
        return p + self.encode(response) + [self.eos], len(p)


# ------------------------------------------------------------------------------------ RWKU-style real format
def load_rwku_target(folder: str | Path) -> dict[str, list[dict]]:
    """Read an RWKU-style per-target folder: forget_level{1,2,3}.json and neighbor_level{1,2}.json (lists of
    {query, answer, level, type, subject}), optionally an RL prompt file (list of {prompt, solution}) and an SFT
    refusal file (list of {instruction, input, output, subject}). Missing optional files give empty lists."""
    from methodlab.core.errors import MissingSourceError

    folder = Path(folder)
    if not folder.is_dir():
        raise MissingSourceError(f"RWKU target folder {folder} does not exist")
    out: dict[str, list[dict]] = {}
    for name in ("forget_level1", "forget_level2", "forget_level3", "neighbor_level1", "neighbor_level2"):
        p = folder / f"{name}.json"
        rows = json.loads(p.read_text()) if p.exists() else []
        for r in rows:
            if not {"query", "answer"} <= set(r):
                raise ValueError(f"{p}: every record needs query and answer, got keys {sorted(r)}")
        out[name] = rows
    rl = sorted(folder.glob("rl_*.json"))
    out["rl"] = json.loads(rl[0].read_text()) if rl else []
    for r in out["rl"]:
        if not ({"prompt", "solution"} <= set(r)) or r["solution"][0] not in ("<reject>", "<normal>"):
            raise ValueError(f"{rl[0]}: RL records are {{prompt, solution: ['<reject>'|'<normal>', ...]}}")
    sft = [p for p in sorted(folder.glob("*.json")) if p.name.startswith(("sft", "rejection", "reject"))]
    out["sft"] = json.loads(sft[0].read_text()) if sft else []
    if not any(out[k] for k in out):
        raise MissingSourceError(f"{folder}: no forget_level*/neighbor_level*/rl_*.json files")
    return out


def write_rwku_target(folder: str | Path, corpus: Corpus, target: int, neighbours: list[int]) -> Path:
    """Write one synthetic target in the RWKU file format (used by the loader's test and as an example)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = corpus.authors[target].name
    rows = author_prompts(corpus.authors, target)
    fb = [{"query": q.prompt, "answer": q.answer, "level": 1, "type": "FB", "subject": name} for q in rows if q.template == FB_INDEX]
    qa = [{"query": q.prompt, "answer": q.answer, "level": 2, "type": "QA", "subject": name} for q in rows if q.template != FB_INDEX]
    (folder / "forget_level1.json").write_text(json.dumps(fb))
    (folder / "forget_level2.json").write_text(json.dumps(qa))
    nb = [q for j in neighbours for q in author_prompts(corpus.authors, j)]
    (folder / "neighbor_level1.json").write_text(json.dumps(
        [{"query": q.prompt, "answer": q.answer, "level": 1, "type": "FB", "subject": q.name} for q in nb if q.template == FB_INDEX]))
    (folder / "neighbor_level2.json").write_text(json.dumps(
        [{"query": q.prompt, "answer": q.answer, "level": 2, "type": "QA", "subject": q.name} for q in nb if q.template != FB_INDEX]))
    rl = [{"prompt": q["query"], "solution": ["<reject>", REFUSALS[0].format(n=name), name]} for q in qa[:3]]
    rl += [{"prompt": q.prompt, "solution": ["<normal>", q.answer]} for q in nb[:3]]
    (folder / "rl_rejection_with_fb_neighbor_target.json").write_text(json.dumps(rl))
    return folder
