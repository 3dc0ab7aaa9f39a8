"""Benchmark: SLiCS's final error against a plain Algorithm 1, and how well that comparison is defined.

On configurations drawn at random (sizes, concepts, atoms, noise, full batch
or mini-batches of 32 to n/4; none of them used for tuning), each row fits

* the plain reference of ``benchmarks/bench_fit.py`` (scipy NNLS per sample,
  a full LAPACK SVD per atom) on ``X``;
* the same reference on ``X`` perturbed by a relative 1e-9 (then
  re-normalised): its *spread*, how far the reference's own final error moves
  under a perturbation of the size of the rank-1 SVD's stopping residual;
* ``SLiCS`` on ``X``.

It prints both relative differences to the reference's final error (the
mean squared NNLS residual with the fitted atoms). Where the spread is
small the fit is well conditioned, and SLiCS must not end above the
reference (the requirement of issue 14: by at most 1e-4 relative). Where the
spread is large, the trajectory of Algorithm 1 is chaotic (small batches of
noisy data: a difference grows by a constant factor per batch): the
reference's own final error is not determined to 1e-4 by its data at that
precision, and no implementation that differs from it by rounding can match
it there; those rows are listed, not judged.

The column ``>d`` marks configurations in which some sample may use more
atoms than there are dimensions: its NNLS can have many minimisers, and which
one a solver returns is arbitrary (a source of differences with no chaos).

    python -m benchmarks.bench_fit_quality            # 60 configurations
    python -m benchmarks.bench_fit_quality --count 20

Run from the repository root: ``python -m benchmarks.bench_fit_quality``.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from benchmarks.bench_fit import reference_error, reference_fit, unit
from slics_core import SLiCS
from slics_core.synthetic import make_concept_cones

#: relative size of the perturbation of X that measures the reference's spread
PERTURBATION = 1e-9
#: a spread above this (relative) marks a configuration as chaotic
CHAOTIC = 1e-5
#: epochs of every fit
EPOCHS = 8


@dataclass(frozen=True)
class Config:
    seed: int
    n: int
    d: int
    concepts: int
    d0: int
    noise: float
    batch: int | None

    def data(self):
        made = make_concept_cones(n_samples=self.n, n_features=self.d, n_concepts=self.concepts,
                                  n_atoms=self.d0 + 1, noise=self.noise, random_state=self.seed)
        return unit(made.X), made.Y

    def __str__(self):
        batch = "full" if self.batch is None else str(self.batch)
        return (f"seed {self.seed} n={self.n} d={self.d} S={self.concepts} d0={self.d0} "
                f"noise={self.noise} batch={batch}")


def held_out_configs(count, seed=2026):
    """``count`` configurations drawn at random (the same ones for the same ``seed``)."""
    rs = np.random.RandomState(seed)
    out = []
    for c in range(count):
        n = int(rs.choice([200, 300, 400, 600]))
        d = int(rs.choice([32, 64, 128]))
        concepts = int(rs.randint(2, 9))
        d0 = int(rs.randint(2, 7))
        noise = float(rs.choice([0.3, 0.5, 0.7, 0.9]))
        batch = [None, n // 4, 50, 32][rs.randint(4)]
        out.append(Config(1000 + c, n, d, concepts, d0, noise, batch))
    return out


@dataclass(frozen=True)
class Comparison:
    config: Config
    reference: float  # the reference's final error
    spread: float     # (reference on perturbed X - reference) / reference
    ours: float       # (SLiCS - reference) / reference
    wide: bool        # some sample may use more atoms than there are dimensions

    @property
    def chaotic(self):
        return abs(self.spread) > CHAOTIC


def compare(config, epochs=EPOCHS):
    """Fit the reference, the perturbed reference and SLiCS on one configuration."""
    X, Y = config.data()
    fit = dict(batch_size=config.batch, random_state=config.seed)
    B, groups = reference_fit(X, Y, config.d0, epochs, **fit)
    ref = reference_error(X, Y, B, groups)
    noise = np.random.RandomState(config.seed).standard_normal(X.shape)
    Xp = unit(X * (1 + PERTURBATION * noise))
    B, groups = reference_fit(Xp, Y, config.d0, epochs, **fit)
    spread = (reference_error(X, Y, B, groups) - ref) / ref
    model = SLiCS(n_atoms=config.d0, n_iter=epochs, **fit).fit(X, Y)
    ours = (model.reconstruction_error(X, Y) - ref) / ref
    wide = int(Y.sum(axis=1).max()) * config.d0 > config.d
    return Comparison(config, ref, spread, ours, wide)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=60, help="how many configurations (default 60)")
    args = parser.parse_args()
    w0, c0 = time.perf_counter(), time.process_time()
    rows = []
    print(f"{'configuration':58s} {'reference':>10s} {'spread':>9s} {'SLiCS':>9s}  >d")
    for config in held_out_configs(args.count):
        r = compare(config)
        rows.append(r)
        mark = "chaotic" if r.chaotic else ""
        print(f"{str(config):58s} {r.reference:10.6f} {r.spread:+9.1e} {r.ours:+9.1e}  "
              f"{'yes' if r.wide else '  '} {mark}", flush=True)
    well = [r for r in rows if not r.chaotic]
    worst = max(well, key=lambda r: r.ours)
    print(f"\n{len(well)} of {len(rows)} well conditioned (spread <= {CHAOTIC:g} under a {PERTURBATION:g} "
          f"perturbation): SLiCS minus reference from {min(r.ours for r in well):+.1e} to {worst.ours:+.1e} "
          f"(requirement: <= +1e-4); |difference| <= 1e-6 in {sum(abs(r.ours) <= 1e-6 for r in well)}")
    chaotic = [r for r in rows if r.chaotic]
    if chaotic:
        print(f"{len(chaotic)} chaotic: reference spread {', '.join(f'{r.spread:+.1e}' for r in chaotic)}; "
              f"SLiCS {', '.join(f'{r.ours:+.1e}' for r in chaotic)}")
    print(f"time: {time.perf_counter() - w0:.1f} s wall, {time.process_time() - c0:.1f} s CPU")


if __name__ == "__main__":
    main()
