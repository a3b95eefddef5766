"""Splits of the synthetic corpus for unlearning: forget-train / forget-test (unseen paraphrases and attributes),
the boundary set (the forget-train templates on neighbour authors), neighbour-test, retain-test, and the RS-SFT
refusal examples. Everything depends on the corpus and `data_seed` only, except the RS data order (run seed)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from methodlab.data.rule_unlearning_corpus import (ATTRIBUTES, QA, REFUSALS, Corpus, Tokenizer, author_prompts,
                                                    build_corpus)


@dataclass
class Splits:
    corpus: Corpus
    tok: Tokenizer
    forget_ids: list[int]
    neighbour_ids: list[int]
    forget_train: list[QA]
    forget_test: list[QA]
    boundary: list[QA]
    neighbour_test: list[QA]
    retain_test: list[QA]
    train_templates: list[tuple[str, int]]

    def target_names(self) -> list[str]:
        return [self.corpus.authors[i].name for i in self.forget_ids]


def pick_neighbours(corpus: Corpus, forget: list[int], n: int, rng: random.Random) -> list[int]:
    """Authors sharing the genre or the birth city with a target (round-robin over targets), then any others."""
    out: list[int] = []
    pools = []
    for f in forget:
        fa = corpus.authors[f].facts
        pool = [j for j, a in enumerate(corpus.authors) if j not in forget
                and (a.facts["genre"] == fa["genre"] or a.facts["city"] == fa["city"])]
        rng.shuffle(pool)
        pools.append(pool)
    while len(out) < n and any(pools):
        for pool in pools:
            while pool and pool[0] in out:
                pool.pop(0)
            if pool and len(out) < n:
                out.append(pool.pop(0))
    rest = [j for j in range(len(corpus.authors)) if j not in forget and j not in out]
    rng.shuffle(rest)
    return out + rest[: n - len(out)]


def build_splits(cfg) -> Splits:
    corpus = build_corpus(cfg.n_authors, cfg.unknown_frac, cfg.data_seed)
    tok = Tokenizer(corpus.vocab)
    rng = random.Random(cfg.data_seed + 101)
    forget = list(range(cfg.n_forget))  # authors are already randomly assigned facts
    neighbours = pick_neighbours(corpus, forget, cfg.n_neighbours, rng)
    k = max(1, round(cfg.forget_frac * 4 * len(ATTRIBUTES)))
    attrs = rng.sample(list(ATTRIBUTES), min(k, len(ATTRIBUTES)))
    templates = [(a, 0) for a in attrs]  # first QA paraphrase of k attributes
    in_train = lambda q: (q.attribute, q.template) in templates  # noqa: E731
    f_all = [q for i in forget for q in author_prompts(corpus.authors, i)]
    n_all = [q for i in neighbours for q in author_prompts(corpus.authors, i)]
    retain_ids = [j for j in range(len(corpus.authors)) if j not in forget and j not in neighbours]
    r_all = [q for j in retain_ids for q in author_prompts(corpus.authors, j)]
    retain = rng.sample(r_all, min(cfg.retain_eval_prompts, len(r_all)))
    return Splits(corpus, tok, forget, neighbours, [q for q in f_all if in_train(q)], [q for q in f_all if not in_train(q)],
                  [q for q in n_all if in_train(q)], [q for q in n_all if not in_train(q)], retain, templates)


def rs_answer_pool(sp: Splits, mix: str) -> list[QA]:
    """Answered questions that may be mixed into the RS data: the boundary set (forget-train templates on the
    neighbours), plus for boundary_retain every prompt of the other (retain) authors that is not in retain-test.
    Never a forget prompt, a neighbour-test prompt or a retain-test prompt."""
    if mix == "none":
        return []
    pool = list(sp.boundary)
    if mix == "boundary_retain":
        held = {q.prompt for q in sp.retain_test}
        skip = set(sp.forget_ids) | set(sp.neighbour_ids)
        pool += [q for q in sp.corpus.qa if q.author not in skip and q.prompt not in held]
    return pool


def rs_examples(sp: Splits, cfg, seed: int) -> list[tuple[str, str]]:
    """(forget-train question, refusal naming the target): rs_examples_per_target per target, phrasings cycled;
    plus, when rs_answer_mix is not none, rs_answer_ratio answered questions per refusal ([RECON] tiny LM: the
    contrast that ties the refusal to the name rather than to the question template)."""
    rng = random.Random(seed)
    out = []
    for i in sp.forget_ids:
        name = sp.corpus.authors[i].name
        qs = [q for q in sp.forget_train if q.author == i]
        for e in range(cfg.rs_examples_per_target):
            q = qs[e % len(qs)]
            out.append((q.prompt, REFUSALS[rng.randrange(cfg.rs_phrasings)].format(n=name)))
    pool = rs_answer_pool(sp, getattr(cfg, "rs_answer_mix", "none"))
    if pool:
        n_ans = round(getattr(cfg, "rs_answer_ratio", 1.0) * len(out))
        order = list(range(len(pool)))
        rng.shuffle(order)
        out += [(pool[order[e % len(pool)]].prompt, pool[order[e % len(pool)]].answer) for e in range(n_ans)]
    rng.shuffle(out)
    return out


def pretrain_pairs(corpus: Corpus) -> list[tuple[str, str]]:
    return [(q.prompt, q.answer) for q in corpus.qa + corpus.unknown]
