"""EP site types (`inference/ep/site_types.py`) and the two likelihoods added through them: the
ordered probit (closed form, `sites.ordinal`) and Student-t noise (quadrature), each checked alone
against brute-force quadrature of its tilted distribution."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate
from scipy.special import log_ndtr
from scipy.stats import t as student_t

from inference.ep import site_types
from inference.ep.problem import EPProblem, SiteGroup
from inference.ep.update import TRACE_COUNT, run
from inference.ep.update import init as ep_init


@functools.lru_cache(maxsize=None)
def _ordinal_reference(lo, hi, s, m, v):
    return _tilted_reference(_ordinal_log_lik(lo, hi, s), m, v)


def _tilted_reference(log_lik, m, v):
    """(log Z, mean, var) of ``exp(log_lik(eta)) N(eta | m, v)`` by adaptive quadrature, with the
    integrand scaled by its maximum on a grid (far-tail cavities have Z ~ exp(-2000))."""
    sd = np.sqrt(v)
    grid = np.linspace(m - 60 * sd - 60, m + 60 * sd + 60, 40001)
    log_f = log_lik(grid) - 0.5 * (grid - m) ** 2 / v - 0.5 * np.log(2 * np.pi * v)
    top = np.max(log_f)
    centre = grid[np.argmax(log_f)]
    # the tilted density's bulk: where the integrand is within e^-60 of its maximum
    inside = grid[log_f > top - 60.0]
    a, b = inside[0] - 1e-3, inside[-1] + 1e-3
    pts = [centre]
    f = lambda e, k: (e - centre) ** k * np.exp(log_lik(np.asarray(e)) - 0.5 * (e - m) ** 2 / v  # noqa: E731
                                                 - 0.5 * np.log(2 * np.pi * v) - top)
    opts = dict(points=pts, limit=500, epsabs=0.0, epsrel=1e-13)
    with warnings.catch_warnings():  # "roundoff detected": the results still agree to 1e-8
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        z = integrate.quad(f, a, b, args=(0,), **opts)[0]
        m1 = integrate.quad(f, a, b, args=(1,), **opts)[0] / z
        m2 = integrate.quad(f, a, b, args=(2,), **opts)[0] / z
    return np.log(z) + top, centre + m1, m2 - m1 ** 2


def _ordinal_log_lik(lo, hi, s):
    def f(eta):
        z1, z0 = (hi - eta) / s, (lo - eta) / s
        flip = z0 > 0
        a, b = np.where(flip, -z0, z1), np.where(flip, -z1, z0)
        la, lb = log_ndtr(a), log_ndtr(b)
        return la + np.log(-np.expm1(np.minimum(lb - la, 0.0)))
    return f


ORDINAL_CASES = [  # (lo, hi, s, m, v): middle and extreme categories, narrow intervals, far tails
    (-1.0, 0.5, 1.0, 0.0, 1.0), (-1.0, 0.5, 0.3, 2.0, 0.5), (2.0, 2.3, 0.5, -1.0, 4.0),
    (-np.inf, -1.0, 1.0, 0.3, 2.0), (1.0, np.inf, 0.7, 0.0, 1.0), (-np.inf, 0.0, 1.0, 30.0, 1.0),
    (0.0, np.inf, 1.0, -40.0, 2.0), (0.0, 1.0, 1.0, 60.0, 1.0), (0.0, 1.0, 1.0, -55.0, 1.0),
    (-0.5, 0.5, 1.0, 0.1, 1e-3), (-0.5, 0.5, 1.0, 0.0, 50.0), (-np.inf, 0.0, 0.2, 3.0, 0.01),
    (0.0, np.inf, 1.0, 2.0, 1.0), (-1.0, np.inf, 1.0, 35.0, 1.0), (-np.inf, 1.0, 1.0, -35.0, 1.0),
]


@pytest.mark.parametrize("lo, hi, s, m, v", ORDINAL_CASES)
def test_ordinal_tilted_moments_match_quadrature_float64(lo, hi, s, m, v):
    got = site_types.Ordinal().tilted(jnp.asarray(m), jnp.asarray(v), {"lo": jnp.asarray(lo), "hi": jnp.asarray(hi),
                                                                        "s": jnp.asarray(s)}, None)
    log_z, mean, var = (float(x) for x in got)
    ref = _ordinal_reference(lo, hi, s, m, v)
    assert abs(log_z - ref[0]) <= 1e-8 * (1 + abs(ref[0]))
    assert abs(mean - ref[1]) <= 1e-8 * (1 + abs(ref[1]))
    assert abs(var - ref[2]) <= 1e-8 * ref[2]


@pytest.mark.parametrize("lo, hi, s, m, v", ORDINAL_CASES)
def test_ordinal_tilted_moments_float32_are_finite_and_close(lo, hi, s, m, v):
    """float32: log Z to 1e-4 relative, mean to 1e-3 tilted sds (plus 1e-5 |mean|), var to
    ``1e-3 + 3e-5 z^2`` relative, ``z`` the cavity's largest standardised distance to a finite cut:
    in a far tail the variance is a difference of terms ~z^2 whose ratio ``N(z) / Z`` carries the
    float32 round-off of ``log Z`` (~1e-7 z^2 / 2), so 5% at z = 42 (float64: 1e-8, above)."""
    with jax.enable_x64(False):
        got = site_types.Ordinal().tilted(jnp.float32(m), jnp.float32(v), {
            "lo": jnp.float32(lo), "hi": jnp.float32(hi), "s": jnp.float32(s)}, None)
        log_z, mean, var = (float(x) for x in got)
        assert all(x.dtype == jnp.float32 for x in got)
    ref = _ordinal_reference(lo, hi, s, m, v)
    assert np.all(np.isfinite([log_z, mean, var])) and var > 0
    assert abs(log_z - ref[0]) <= 1e-4 * (1 + abs(ref[0]))
    assert abs(mean - ref[1]) <= 1e-3 * np.sqrt(ref[2]) + 1e-5 * abs(ref[1])
    z = max(abs(c - m) / np.sqrt(s * s + v) for c in (lo, hi) if np.isfinite(c))
    assert abs(var - ref[2]) <= (1e-3 + 3e-5 * z * z) * ref[2]


def _t_link(df, scale):
    def link(eta, consts, shared):
        return jax.scipy.stats.t.logpdf(consts, df, eta, scale)
    return link


@pytest.mark.parametrize("y, m, v", [(0.0, 0.0, 1.0), (3.0, 0.0, 1.0), (8.0, 0.5, 2.0), (-12.0, 1.0, 0.5),
                                     (0.2, 0.0, 0.05)])
def test_student_t_quadrature_site_matches_quadrature(y, m, v):
    """Student-t noise (df 3, scale 1) through the generic quadrature site, 1e-8 against adaptive
    quadrature; an outlier (y far from m) gives a tilted variance above the cavity's: a negative
    site precision, which the site reports as it is (the engine's cavity check handles it)."""
    site = site_types.Quadrature(_t_link(3.0, 1.0), 96)
    log_z, mean, var = (float(x) for x in site.tilted(jnp.asarray(m), jnp.asarray(v), {"consts": jnp.asarray(y)}, None))
    ref = _tilted_reference(lambda e: student_t.logpdf(y, 3.0, e, 1.0), m, v)
    assert abs(log_z - ref[0]) <= 1e-8 * (1 + abs(ref[0]))
    assert abs(mean - ref[1]) <= 1e-8 * (1 + abs(ref[1]))
    assert abs(var - ref[2]) <= 1e-8 * ref[2]
    if abs(y - m) > 5:
        assert var > v  # site precision 1/var - 1/v < 0


def test_site_types_are_static_hashable_values_and_names_still_work():
    assert site_types.Probit() == site_types.Probit() and hash(site_types.Ordinal()) == hash(site_types.Ordinal())
    g_new = SiteGroup(site_types.Probit(), {"s": jnp.ones(3)})
    g_old = SiteGroup("probit", {"s": jnp.ones(3)})
    assert jax.tree.structure(g_new) == jax.tree.structure(g_old) and g_old.kind == "probit"
    with pytest.raises(ValueError, match="kind must be one of"):
        SiteGroup("logit", {"s": jnp.ones(3)})


def test_ordinal_problems_of_one_structure_compile_once():
    def problem(seed):
        r = np.random.default_rng(seed)
        lo = np.where(r.random(6) < 0.3, -np.inf, r.normal(size=6) - 1.0)
        g = SiteGroup(site_types.Ordinal(), {"lo": jnp.asarray(lo), "hi": jnp.asarray(lo + 1.0), "s": jnp.ones(6)})
        K = np.eye(6) + 0.5
        return EPProblem("function", None, jnp.asarray(K), jnp.asarray(r.normal(size=6)), (g,))

    p0 = problem(0)
    run(p0, ep_init(p0), 1.0, 1e-8, 5)
    before = TRACE_COUNT["run"]
    p1 = problem(1)
    state, it, skipped, change = run(p1, ep_init(p1), 1.0, 1e-8, 100)
    assert TRACE_COUNT["run"] == before and float(change) <= 1e-8 and np.all(np.isfinite(np.asarray(state.tau)))
