"""Dense Gaussian reference for the Kalman tests: the joint of all states and observations of a
small LDS, conditioned exactly with numpy / scipy (no recursion)."""

import numpy as np
from scipy import stats

N, D, T = 3, 2, 5  # states, observations, steps: one set of shapes for every test


def random_lds(seed, singular_q=False):
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(N, N)) / np.sqrt(N)
    a = rng.normal(size=(N, N))
    Q = a @ a.T * 0.3 + 0.1 * np.eye(N)
    if singular_q:  # noise on one direction only (e.g. a velocity)
        v = rng.normal(size=(N, 1))
        Q = v @ v.T
    H = rng.normal(size=(D, N))
    b = rng.normal(size=(D, D))
    R = b @ b.T * 0.2 + 0.2 * np.eye(D)
    return rng.normal(size=N), np.diag(rng.uniform(0.5, 2.0, N)), F, Q, H, R


def simulate(params, seed, num_steps=T):
    m0, p0, F, Q, H, R = params
    rng = np.random.default_rng(seed + 100)
    x = np.zeros((num_steps, N))
    x[0] = rng.multivariate_normal(m0, p0)
    for t in range(1, num_steps):
        x[t] = F @ x[t - 1] + rng.multivariate_normal(np.zeros(N), Q)
    return x @ H.T + rng.multivariate_normal(np.zeros(D), R, size=num_steps)


def dense_joint(params, num_steps):
    """Mean (T N,) and covariance (T N, T N) of all states, cross-covariance with the
    observations and the observations' covariance (T D, T D)."""
    m0, p0, F, Q, H, R = params
    N = H.shape[1]  # noqa: N806 - any sizes, not only the module's
    means = [m0]
    marg = [p0]
    for _ in range(1, num_steps):
        means.append(F @ means[-1])
        marg.append(F @ marg[-1] @ F.T + Q)
    sx = np.zeros((num_steps * N, num_steps * N))
    for s in range(num_steps):
        block = marg[s]
        for t in range(s, num_steps):
            sx[t * N:(t + 1) * N, s * N:(s + 1) * N] = block
            sx[s * N:(s + 1) * N, t * N:(t + 1) * N] = block.T
            block = F @ block
    hb = np.kron(np.eye(num_steps), H)
    return np.concatenate(means), sx, sx @ hb.T, hb @ sx @ hb.T + np.kron(np.eye(num_steps), R), hb


def dense_posterior(params, y, upto=None):
    """Exact moments of the states given the observed (non-NaN) entries of y[:upto] and
    log p(those entries): (means (T, N), covs (T, N, N), full covariance, log likelihood)."""
    num_steps = y.shape[0]
    N, D = params[4].shape[1], params[4].shape[0]  # noqa: N806
    mu, sx, sxy, syy, hb = dense_joint(params, num_steps)
    flat = y.reshape(-1)
    keep = ~np.isnan(flat)
    if upto is not None:
        keep &= np.repeat(np.arange(num_steps), D) < upto
    my = hb @ mu
    gain = np.linalg.solve(syy[np.ix_(keep, keep)], sxy[:, keep].T).T
    mean = mu + gain @ (flat[keep] - my[keep])
    cov = sx - gain @ sxy[:, keep].T
    ll = stats.multivariate_normal(my[keep], syy[np.ix_(keep, keep)]).logpdf(flat[keep]) if keep.any() else 0.0
    covs = np.stack([cov[t * N:(t + 1) * N, t * N:(t + 1) * N] for t in range(num_steps)])
    return mean.reshape(num_steps, N), covs, cov, ll


def dense_filter(params, y):
    out = [dense_posterior(params, y, upto=t + 1) for t in range(y.shape[0])]
    return (out[-1][3], np.stack([o[0][t] for t, o in enumerate(out)]), np.stack([o[1][t] for t, o in enumerate(out)]))


def with_missing(y):
    """y with one entry of step 2, all of step 4 and one entry of step 7 missing (those < T)."""
    y = y.copy()
    for t, cols in ((2, [0]), (4, slice(None)), (7, [1])):
        if t < y.shape[0]:
            y[t, cols] = np.nan
    return y
