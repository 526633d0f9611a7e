"""EM for the mixture of experts (inference.moe_em): it recovers simulated piecewise-linear and
piecewise-logistic experts, its objective never decreases, the gating step is the damped Newton
step it claims (its gradient vanishes at the fixed point), and bad input is named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inference import moe_em

RNG = np.random.default_rng(0)
X = RNG.uniform(-3, 3, 300)
Y = np.where(X < 0, -1 - 2 * X, 1 + X) + 0.2 * RNG.normal(size=300)


def test_em_recovers_the_experts_and_never_decreases_its_objective():
    fit = moe_em.em(X, Y, 2)
    p = fit.params
    assert np.allclose(np.asarray(p.coef[:, 0]), [-2.0, 1.0], atol=0.05), p.coef
    assert np.allclose(np.asarray(p.intercept), [-1.0, 1.0], atol=0.08), p.intercept
    assert np.allclose(np.asarray(p.scales), 0.2, atol=0.03), p.scales
    boundary = -(p.gating_bias[0] - p.gating_bias[1]) / (p.gating[0, 0] - p.gating[1, 0])
    assert abs(float(boundary)) < 0.05 and bool(fit.converged)
    trace = np.asarray(fit.objective)
    trace = trace[np.isfinite(trace)]
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:])), np.diff(trace).min()
    # the log likelihood reported is the sum of log p(y | x) at the fitted parameters
    ll = jax.scipy.special.logsumexp(moe_em.joint_log_terms(p, jnp.asarray(X[:, None]), jnp.asarray(Y), "linear"), -1)
    assert float(fit.log_likelihood) == pytest.approx(float(ll.sum()), rel=1e-10)


def test_gating_step_reaches_a_stationary_point_of_its_objective():
    """Repeated damped Newton steps on fixed responsibilities: the penalised soft-target
    multinomial log-likelihood's gradient vanishes (a wrong Hessian would stall or diverge)."""
    X1 = jnp.asarray(np.c_[np.ones(300), X])
    r = jax.nn.softmax(jnp.asarray(np.c_[2 * X, -X + 0.3 * RNG.normal(size=300)]), -1)
    w, prec = jnp.ones(300), jnp.full(2, 0.1)
    gate = jnp.zeros((2, 2))
    for _ in range(12):
        gate = moe_em._gating_step(X1, w, r, gate, prec)

    def objective(g):
        return jnp.sum(r * jax.nn.log_softmax(X1 @ g.T, -1)) - 0.05 * jnp.sum(g**2)

    assert float(jnp.max(jnp.abs(jax.grad(objective)(gate)))) < 1e-8


def test_logistic_experts():
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, 400)
    p = np.where(x < 0, 1 / (1 + np.exp(-3 * (x + 1.5))), 1 / (1 + np.exp(3 * (x - 1.5))))
    y = (rng.uniform(size=400) < p).astype(float)
    fit = moe_em.em(x, y, 2, expert="logistic")
    slopes = np.asarray(fit.params.coef[:, 0])
    assert slopes[0] > 1.0 and slopes[1] < -1.0, slopes  # rising on the left, falling on the right
    assert np.all(np.isfinite(np.asarray(fit.objective)[: int(fit.num_iters)]))


@pytest.mark.parametrize("args,kwargs,match", [
    ((X, Y, 0), {}, "num_experts"),
    ((X, Y, 2), {"expert": "tree"}, "expert"),
    ((X, Y[:5], 2), {}, "y a finite"),
    ((np.r_[X[:-1], np.nan], Y, 2), {}, "finite"),
    ((X, Y, 2), {"expert": "logistic"}, "0/1 labels"),
    ((X, Y, 2), {"num_restarts": 0}, "num_restarts"),
])
def test_bad_input_is_named(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        moe_em.em(*args, **kwargs)
