"""inference.spikeslab.ep_probit (fully factorised, thesis ch. 7) and .ep_probit_full (full
covariance): against the exact posterior of tiny problems, schedules, degenerate genes, and
n = 100 runs with d = 2,000 genes (d = 10,000 under ``-m slow``)."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inference.spikeslab import ep_probit, ep_probit_full
from inference.spikeslab.exact import enumerate_probit

HYPER = (jnp.asarray(0.5), jnp.asarray(1e-9), jnp.asarray(1000))
# Converged means below FLOOR. On tiny(2) the full-covariance EP cannot get below ~1e-8 in float64:
# gene 0's prior site is clipped at precision 1e-6, so K = X Lam^-1 X^T holds 1e6-sized terms whose
# Woodbury difference is an O(0.1) posterior variance (8 digits lost). Its sweep-to-sweep change
# fluctuates between 3e-9 and 3e-8 from sweep ~50 on, with either parallel schedule.
FLOOR = 1e-7


def tiny(seed):
    """n = 40, d = 3 with two correlated genes (corr 0.6), gene 0 carrying the signal."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 3))
    X[:, 1] = 0.6 * X[:, 0] + 0.8 * X[:, 1]
    return X, np.sign(X[:, 0] + 0.5 * rng.normal(size=40))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("module,incl_tol,ev_tol", [(ep_probit_full, 0.05, 0.1), (ep_probit, 0.05, 0.2)])
def test_against_exact_enumeration(seed, module, incl_tol, ev_tol):
    """Exact: 2^3 models, weights by 40-point Gauss-Hermite. Measured max inclusion / evidence
    errors (seeds 0-2): full 0.016/0.002/0.015 and 0.018/0.004/0.043 nats; factorised
    0.016/0.006/0.034 and 0.034/0.009/0.157 nats."""
    X, y = tiny(seed)
    p, s2 = np.full(3, 0.3), np.ones(3)
    ex = enumerate_probit(X, y, p_incl=p, slab_var=s2)
    data = ep_probit.make_data(X, y, slab_var=s2, p_incl=p)
    state = module.run(data, *HYPER)
    out = module.finalize(state, data)
    assert float(state.max_change) < FLOOR
    assert np.max(np.abs(np.asarray(out[2]) - ex.inclusion)) < incl_tol
    assert abs(float(out[5]) - ex.log_evidence) < ev_tol


def test_factorized_sequential_and_parallel_same_fixed_point():
    X, y = tiny(2)
    data = ep_probit.make_data(X, y, slab_var=np.ones(3), p_incl=np.full(3, 0.3))
    par, seq = ep_probit.run(data, *HYPER), ep_probit.run(data, *HYPER, sequential=True)
    np.testing.assert_allclose(np.asarray(par.incl), np.asarray(seq.incl), atol=1e-7)
    np.testing.assert_allclose(np.asarray(par.nu / par.tau), np.asarray(seq.nu / seq.tau), atol=1e-7)


def test_full_sequential_and_parallel_same_fixed_point():
    """The sequential schedule (rank-one updates of cov(f)) and the parallel one of the
    full-covariance EP converge to the same sites, moments and evidence."""
    X, y = tiny(2)
    data = ep_probit.make_data(X, y, slab_var=np.ones(3), p_incl=np.full(3, 0.3))
    par, seq = ep_probit_full.run(data, *HYPER), ep_probit_full.run(data, *HYPER, sequential=True)
    assert float(par.max_change) < FLOOR and float(seq.max_change) < FLOOR
    np.testing.assert_allclose(np.asarray(par.incl), np.asarray(seq.incl), atol=1e-7)
    np.testing.assert_allclose(np.asarray(par.m), np.asarray(seq.m), atol=1e-7)
    np.testing.assert_allclose(np.asarray(par.v), np.asarray(seq.v), atol=1e-7)
    ev_par, ev_seq = float(ep_probit_full.finalize(par, data)[5]), float(ep_probit_full.finalize(seq, data)[5])
    # The evidence formula's own round-off on these clipped sites (see FLOOR): sites moved by 1e-12
    # (relative) move it by ~1e-6 nats (measured 1.1e-6 to 1.6e-6 with jax 0.12.0-0.12.1), so the
    # schedules are compared at that floor, measured here, not at a fixed 1e-6.
    rng = np.random.default_rng(0)
    evs = [float(ep_probit_full.finalize(par._replace(
        lik_tau=par.lik_tau * (1 + 1e-12 * rng.normal(size=par.lik_tau.shape)),
        lik_nu=par.lik_nu * (1 + 1e-12 * rng.normal(size=par.lik_nu.shape))), data)[5]) for _ in range(8)]
    floor = max(evs) - min(evs)
    assert floor < 1e-5
    assert abs(ev_par - ev_seq) <= 3 * floor + 1e-9, (ev_par - ev_seq, floor)


def correlated(seed, n=60, d=300):
    """n x d probit data, 5 genes of weight 2 (genes 0 and 1 correlated 0.7), inclusion prior 5/d."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[:, 1] = 0.7 * X[:, 0] + 0.7 * X[:, 1]
    w = np.zeros(d)
    w[:5] = 2.0
    y = np.sign(X @ w + rng.normal(size=n))
    return ep_probit.make_data(X, y, slab_var=np.ones(d), p_incl=np.full(d, 5 / d))


@pytest.mark.parametrize("seed", [0, 1])
def test_full_anderson_same_fixed_point_in_fewer_sweeps(seed):
    """Anderson-extrapolated undamped sweeps reach the fixed point of plain sweeps: inclusion
    probabilities, means (in posterior SDs) and variances within 1e-6 of a reference run (damping
    0.5, tol 1e-12), like the plain undamped run, in well under the plain run's sweeps. Measured
    (tol 1e-6): 21 / 19 sweeps against 48 / 65, errors <= 1e-7, log Z within 8e-6 nats."""
    data = correlated(seed)
    hyper = lambda damping, tol: (jnp.asarray(damping), jnp.asarray(tol), jnp.asarray(1000))  # noqa: E731
    ref = ep_probit_full.finalize(ep_probit_full.run(data, *hyper(0.5, 1e-12)), data)
    plain = ep_probit_full.run(data, *hyper(1.0, 1e-6))
    fast = ep_probit_full.run(data, *hyper(1.0, 1e-6), accelerate=True)
    assert float(plain.max_change) < 1e-6 and float(fast.max_change) < 1e-6
    assert int(fast.iteration) < 0.6 * int(plain.iteration)
    for state in (plain, fast):
        m, v, incl, _, _, log_z = ep_probit_full.finalize(state, data)
        assert np.max(np.abs(np.asarray(incl - ref[2]))) < 1e-6
        assert np.max(np.abs(np.asarray(m - ref[0])) / np.sqrt(np.asarray(ref[1]))) < 1e-6
        assert np.max(np.abs(np.asarray(v / ref[1]) - 1)) < 1e-6
        assert abs(float(log_z - ref[5])) < 1e-4


def test_full_anderson_rejects_an_invalid_extrapolation():
    """An extrapolation with a negative precision is replaced by the plain sweep's sites and the
    history is cleared: a history crafted so that the extrapolation is ``-1`` everywhere gives
    exactly the sites of `update`."""
    data = correlated(0, d=50)
    state = ep_probit_full.init(data)
    for _ in range(3):
        state = ep_probit_full.update(state, data, 1.0)
    plain = ep_probit_full.update(state, data, 1.0)
    x = jnp.concatenate([state.lik_tau, state.lik_nu, state.tau, state.nu])
    g = jnp.concatenate([plain.lik_tau, plain.lik_nu, plain.tau, plain.nu])
    M = ep_probit_full.ANDERSON_MEMORY
    dF = jnp.zeros((M, x.size)).at[0].set(g - x)  # gamma = (1, 0, ...) up to the regularisation
    dG = jnp.zeros((M, x.size)).at[0].set(g + 1.0)  # extrapolation g - dG[0] = -1
    used = jnp.zeros(M).at[0].set(1.0)
    accel = ep_probit_full.AcceleratedState(state, dF, dG, g - x, g, used, jnp.asarray(1, jnp.int32))
    out = ep_probit_full.update_accelerated(accel, data, 1.0)
    for name in ("lik_tau", "lik_nu", "tau", "nu", "mf", "vf"):
        np.testing.assert_allclose(np.asarray(getattr(out.ep, name)), np.asarray(getattr(plain, name)), rtol=1e-12,
                                   err_msg=name)
    assert float(jnp.sum(out.used)) == 0.0
    # control: the same history with a valid target is used (the sites move off G(x))
    ok = ep_probit_full.update_accelerated(accel._replace(dG=jnp.zeros_like(dG).at[0].set(0.5 * (g - x))), data, 1.0)
    assert float(jnp.sum(ok.used)) > 0 and not np.allclose(np.asarray(ok.ep.tau), np.asarray(plain.tau))


@pytest.mark.parametrize("module", [ep_probit, ep_probit_full])
def test_constant_and_zero_genes_no_nan(module):
    """An all-zero gene keeps its prior inclusion probability; a constant gene acts as a bias.
    tiny(0)'s signal gene with the two in place of its other genes: 40 x 3, the shape of
    `test_against_exact_enumeration`, whose compiled EP programs this reuses."""
    X, y = tiny(0)
    X = np.column_stack([X[:, 0], np.zeros(40), np.full(40, 2.0)])
    data = ep_probit.make_data(X, y, slab_var=np.ones(3), p_incl=np.full(3, 0.3))
    out = module.finalize(module.run(data, *HYPER), data)
    assert all(np.all(np.isfinite(np.asarray(o))) for o in out)
    assert float(out[2][1]) == pytest.approx(0.3, abs=1e-9)


@pytest.mark.parametrize("module", [ep_probit, ep_probit_full])
@pytest.mark.parametrize("d", [2_000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_many_genes(module, d):
    """n = 100 patients, d genes (memory O(n d)): converges, finite evidence, the 5 true genes
    ranked first, in seconds. The default run takes d = 2,000; ``-m slow`` the issue's d = 10,000
    (measured on the shared 2-core machine, compile included: factorised ~3 s, full ~5 s)."""
    rng = np.random.default_rng(0)
    n = 100
    labels = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    X = rng.normal(size=(n, d))
    X[:, :5] += 1.2 * labels[:, None] * np.array([1, -1, 1, -1, 1.0])
    data = ep_probit.make_data(X, labels, slab_var=np.ones(d), p_incl=np.full(d, 32 / d))
    start = time.perf_counter()
    state = module.run(data, jnp.asarray(0.5), jnp.asarray(1e-4), jnp.asarray(300))
    out = jax.block_until_ready(module.finalize(state, data))
    elapsed = time.perf_counter() - start
    print(f"{module.__name__}: d={d} n=100 EP {elapsed:.2f} s, {int(state.iteration)} sweeps")
    incl = np.asarray(out[2])
    assert float(state.max_change) < 1e-4 and np.isfinite(float(out[5]))
    assert set(np.argsort(-incl)[:5]) == set(range(5))
    assert elapsed < 60  # seconds, not minutes, even on a loaded machine
