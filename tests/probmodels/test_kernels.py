"""Kernels (`probmodels.kernels`): explicit formulas, sums/products, pytrees under jit/grad,
hyperparameter validation and the positive-definiteness check with jitter escalation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from probmodels.kernels import (
    RBF, Constant, Kernel, Linear, Matern, Polynomial, Product, Sum, gram, positive_definite_jitter,
)  # fmt: skip

RNG = np.random.default_rng(0)
X1 = RNG.normal(size=(6, 3))
X2 = RNG.normal(size=(4, 3))
D = np.sqrt(((X1[:, None] - X2[None]) ** 2).sum(-1))


def test_rbf_formula():
    k = RBF(lengthscale=0.7, variance=2.0)
    np.testing.assert_allclose(k(X1, X2), 2.0 * np.exp(-0.5 * D**2 / 0.7**2), rtol=1e-12)
    np.testing.assert_allclose(k.diag(X1), 2.0 * np.ones(6), rtol=1e-12)


def test_rbf_ard_lengthscales():
    ls = np.array([0.5, 1.0, 2.0])
    d2 = (((X1[:, None] - X2[None]) / ls) ** 2).sum(-1)
    np.testing.assert_allclose(RBF(lengthscale=ls)(X1, X2), np.exp(-0.5 * d2), rtol=1e-12)


@pytest.mark.parametrize("nu,formula", [
    (0.5, lambda r: np.exp(-r)),
    (1.5, lambda r: (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)),
    (2.5, lambda r: (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)),
])
def test_matern_formulas(nu, formula):
    k = Matern(nu=nu, lengthscale=1.3, variance=0.5)
    np.testing.assert_allclose(k(X1, X2), 0.5 * formula(D / 1.3), rtol=1e-12)


def test_linear_and_polynomial_formulas():
    dot = X1 @ X2.T
    np.testing.assert_allclose(Linear(variance=2.0, bias=0.5)(X1, X2), 0.5 + 2.0 * dot, rtol=1e-12)
    np.testing.assert_allclose(Polynomial(degree=3, variance=0.5, bias=1.0)(X1, X2), 0.5 * (1.0 + dot) ** 3,
                               rtol=1e-12)


def test_sums_products_and_scaling():
    a, b = RBF(0.7), Linear(variance=0.3)
    np.testing.assert_allclose((a + b)(X1, X2), a(X1, X2) + b(X1, X2), rtol=1e-12)
    np.testing.assert_allclose((a * b)(X1, X2), a(X1, X2) * b(X1, X2), rtol=1e-12)
    np.testing.assert_allclose((3.0 * a)(X1, X2), 3.0 * a(X1, X2), rtol=1e-12)
    np.testing.assert_allclose((a + 1.0)(X1, X2), a(X1, X2) + 1.0, rtol=1e-12)
    assert isinstance(a + b, Sum) and isinstance(a * b, Product) and isinstance(2 * a, Product)
    with pytest.raises(TypeError):
        Sum(a, "rbf")


def test_one_dimensional_inputs_are_columns():
    x = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(RBF()(x, x), RBF()(x[:, None], x[:, None]))
    with pytest.raises(ValueError, match="features"):
        RBF()(X1, X1[:, :2])


def test_kernels_are_pytrees_under_jit_and_grad():
    """Hyperparameters are leaves: traced under jit, differentiable (finite gradient even at
    coincident points for Matern), and a new value does not recompile."""
    k = RBF(0.7) + 0.5 * Matern(nu=0.5, lengthscale=1.0)
    assert len(jax.tree_util.tree_leaves(k)) == 5
    f = jax.jit(lambda k, X: k(X, X).sum())
    f(k, X1)
    before = f._cache_size()
    f(RBF(0.3) + 0.5 * Matern(nu=0.5, lengthscale=2.0), X1)
    assert f._cache_size() == before

    @jax.jit
    def loss(ls):
        return Matern(nu=1.5, lengthscale=ls)(X1, X1).sum()

    g = jax.jit(jax.grad(loss))(1.0)
    eps = 1e-6
    fd = (loss(1.0 + eps) - loss(1.0 - eps)) / (2 * eps)
    assert np.isfinite(g) and float(g) == pytest.approx(float(fd), rel=1e-6)


def _rbf_ard(p):
    return RBF(jnp.exp(p[:3]), jnp.exp(p[3]))


def _matern(p):
    return Matern(2.5, jnp.exp(p[0]), jnp.exp(p[3]))


def _sum_product(p):
    return RBF(jnp.exp(p[1])) + Constant(jnp.exp(p[3])) * Matern(0.5, jnp.exp(p[:3]))


@pytest.mark.parametrize("make, shift, x64", [
    (_rbf_ard, 0.0, True), (_rbf_ard, 1e3, False), (_matern, 1e3, True), (_sum_product, 1e3, False)])
def test_gram_derivatives_equal_the_pairwise_ones(make, shift, x64):
    """A kernel's Gram matrix (`_scaled_sqdist`, derivatives by matrix products from centred
    inputs) against the pairwise evaluation it replaces (`_pairwise`, autodiff through each pair):
    values and the gradient of ``sum(W * K)`` in the hyperparameters and both inputs, in float32
    and float64, with inputs near the origin and 1000 away from it (without the centring, the
    products cancel and the far cases fail); the second derivative in the hyperparameters once
    (RBF, float64). Tolerance: 30 eps times the largest entry (times the shift for input gradients: the
    centre itself is rounded)."""
    from probmodels.kernels import _pairwise

    with jax.enable_x64(x64):
        dt = jnp.float64 if x64 else jnp.float32
        rng = np.random.default_rng(4)
        A = jnp.asarray(rng.normal(size=(7, 3)) + shift, dt)
        B = jnp.asarray(rng.normal(size=(5, 3)) + shift, dt)
        W = jnp.asarray(rng.normal(size=(7, 5)), dt)
        p = jnp.asarray([0.1, -0.3, 0.4, 0.2], dt)
        tol = 30 * float(jnp.finfo(dt).eps)
        second = x64 and shift == 0.0  # the second derivative once (its compilation is slow)

        def loss(p, A, B, gram):
            return jnp.sum(W * gram(make(p), A, B))

        @jax.jit
        def both(p, A, B):
            out = []
            for gram in ((lambda k, a, b: k(a, b)), _pairwise):
                hess = jax.hessian(loss)(p, A, B, gram) if second else jnp.zeros(())
                out.append((gram(make(p), A, B), jax.grad(loss, (0, 1, 2))(p, A, B, gram), hess))
            return out

        (k_new, g_new, h_new), (k_old, g_old, h_old) = both(p, A, B)
        np.testing.assert_allclose(k_new, k_old, rtol=tol, atol=tol)
        for argnum, (a, b) in enumerate(zip(g_new, g_old)):
            scale = float(jnp.max(jnp.abs(b)))
            np.testing.assert_allclose(a, b, atol=tol * scale * (1 + shift * (argnum > 0)), rtol=0)
        np.testing.assert_allclose(h_new, h_old, atol=10 * tol * float(jnp.max(jnp.abs(h_old))), rtol=0)


@pytest.mark.parametrize("make,match", [
    (lambda: RBF(lengthscale=-1.0), "lengthscale"),
    (lambda: RBF(variance=0.0), "variance"),
    (lambda: RBF(lengthscale=np.nan), "lengthscale"),
    (lambda: Matern(nu=1.0), "nu"),
    (lambda: Polynomial(degree=0), "degree"),
    (lambda: Linear(bias=-1.0), "bias"),
    (lambda: RBF(lengthscale=np.ones((2, 2))), "lengthscale"),
])
def test_bad_hyperparameters_are_named(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_validation_steps_aside_under_tracing():
    out = jax.jit(lambda ls: RBF(ls)(X1, X1)[0, 1])(0.5)
    assert np.isfinite(out)


def test_pd_check_jitter_escalates_for_duplicated_points():
    """A Gram matrix with duplicated rows is singular: the check returns a jitter on the ladder
    (> base) that makes the Cholesky factorisation work; a well-conditioned one needs the base."""
    Xd = np.vstack([X1, X1])
    K = np.asarray(RBF(5.0)(Xd, Xd))
    jit = positive_definite_jitter(K)
    assert jit > 0
    np.linalg.cholesky(K + jit * np.eye(len(K)))
    Kg, jit2 = gram(RBF(5.0), Xd)
    assert jit2 == jit and np.allclose(np.asarray(Kg), K + jit * np.eye(len(K)))
    assert positive_definite_jitter(np.eye(3)) == pytest.approx(1e-6)


def test_pd_check_rejects_bad_matrices_with_their_name():
    indefinite = np.array([[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="my_kernel_matrix is not positive definite"):
        positive_definite_jitter(indefinite, name="my_kernel_matrix")
    with pytest.raises(ValueError, match="not symmetric"):
        positive_definite_jitter(np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        positive_definite_jitter(np.array([[1.0, np.nan], [np.nan, 1.0]]))
    with pytest.raises(ValueError, match="square"):
        positive_definite_jitter(np.ones((2, 3)))


def test_gram_names_the_kernel_when_not_pd():
    class Bad(Kernel):  # a "kernel" whose Gram matrix is indefinite
        def evaluate(self, x1, x2):
            return -jnp.sum((x1 - x2) ** 2)

    with pytest.raises(ValueError, match="Bad"):
        gram(Bad(), X1)
    with pytest.raises(TypeError, match="Kernel"):
        gram(lambda a, b: a @ b.T, X1)


def test_constant_kernel():
    np.testing.assert_allclose(Constant(2.0)(X1, X2), 2.0 * np.ones((6, 4)))
