"""Mixing datasets as webdataset does: RoundRobin (in turn) and RandomMix (by probability)."""

import random

from .shardlists import _Dataset


def _round_robin_shortest(*sources):
    i = 0
    while True:
        try:
            yield next(sources[i % len(sources)])
        except StopIteration:
            return
        i += 1


def _round_robin_longest(*sources):
    sources = list(sources)
    i = 0
    while sources:
        i %= len(sources)
        try:
            item = next(sources[i])
        except StopIteration:
            del sources[i]
            continue
        i += 1
        yield item


class RoundRobin(_Dataset):
    """An item of each dataset in turn, until the first ends (longest=True: the last)."""

    def __init__(self, datasets, longest=False):
        super().__init__()
        self.datasets, self.longest = datasets, longest

    def __iter__(self):
        sources = [iter(d) for d in self.datasets]
        return (_round_robin_longest if self.longest else _round_robin_shortest)(*sources)


def random_samples(sources, probs=None, longest=False):
    """Items of sources drawn with probabilities probs (equal by default), until one ends
    (longest=True: until all have)."""
    sources = list(sources)
    probs = [1.0] * len(sources) if probs is None else [float(p) for p in probs]
    while sources:
        i = random.choices(range(len(sources)), weights=probs)[0]
        try:
            yield next(sources[i])
        except StopIteration:
            if not longest:
                return
            del sources[i]
            del probs[i]


class RandomMix(_Dataset):
    """Items drawn from datasets at random, each with its probability in probs."""

    def __init__(self, datasets, probs=None, longest=False):
        super().__init__()
        self.datasets, self.probs, self.longest = datasets, probs, longest

    def __iter__(self):
        return random_samples([iter(d) for d in self.datasets], self.probs, longest=self.longest)
