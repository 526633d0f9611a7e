"""inference.kalman.em: the log likelihood never decreases, the E step agrees with the smoother,
and the fit recovers simulated parameters up to the similarity transform that leaves the
likelihood unchanged (compared by invariants: eigenvalues of F, R, the observations' lag-0 and
lag-1 autocovariances); missing rows; bad input."""

import numpy as np
import pytest

from inference import kalman

F_TRUE = np.array([[0.8, 0.3], [-0.3, 0.8]])  # eigenvalues 0.8 +- 0.3i
H_TRUE = np.array([[1.0, 0.0], [0.5, 1.0], [-0.7, 0.4], [0.3, -0.8]])
Q_TRUE = np.diag([0.5, 0.3])
R_TRUE = np.diag([0.2, 0.3, 0.25, 0.15])


def simulate(num_steps, seed):
    rng = np.random.default_rng(seed)
    x = np.zeros((num_steps, 2))
    for t in range(1, num_steps):
        x[t] = F_TRUE @ x[t - 1] + rng.multivariate_normal(np.zeros(2), Q_TRUE)
    return x @ H_TRUE.T + rng.multivariate_normal(np.zeros(4), R_TRUE, size=num_steps)


def invariants(F, Q, H, R):
    """Eigenvalues of F (sorted by imaginary part), R's diagonal, and the observations'
    stationary lag-0 and lag-1 covariances H P H' + R, H F P H'."""
    P = np.eye(2)
    for _ in range(500):
        P = F @ P @ F.T + Q
    eig = np.linalg.eigvals(F)
    return eig[np.argsort(eig.imag)], np.diag(R), H @ P @ H.T + R, H @ F @ P @ H.T


def test_em_is_monotone_and_recovers_the_parameters():
    """T = 1000, 150 EM steps: eigenvalues of F within 0.05, R's diagonal within 0.1, the
    autocovariances within 0.3 (measured errors 0.018, 0.064, 0.11; over seeds 0-2 up to 0.023,
    0.064, 0.22: sampling error and EM's slow last steps)."""
    y = simulate(1000, 0)
    y[100:110] = np.nan  # missing rows
    fit = kalman.em(y, 2, max_iter=150)
    trace = np.asarray(fit.log_likelihood)
    assert np.all(np.diff(trace) > -1e-9 * np.abs(trace[1:]))
    assert trace[-1] > trace[0] + 100
    got = invariants(*(np.asarray(fit.params[k]) for k in ("F", "Q", "H", "R")))
    want = invariants(F_TRUE, Q_TRUE, H_TRUE, R_TRUE)
    np.testing.assert_allclose(got[0], want[0], atol=0.05)
    np.testing.assert_allclose(got[1], want[1], atol=0.1)
    np.testing.assert_allclose(got[2], want[2], atol=0.3)
    np.testing.assert_allclose(got[3], want[3], atol=0.3)
    # the last trace entry is the log likelihood at the returned parameters
    ll = kalman.log_likelihood(*(fit.params[k] for k in ("init_mean", "init_cov", "F", "Q", "H", "R")), y)
    np.testing.assert_allclose(ll, trace[-1], rtol=1e-10)
    # and the fit beats the truth's likelihood (it is the maximum)
    truth = kalman.log_likelihood(np.zeros(2), np.eye(2), F_TRUE, Q_TRUE, H_TRUE, R_TRUE, y)
    assert trace[-1] > float(truth)


def test_em_bad_input():
    y = simulate(50, 1)
    with pytest.raises(ValueError, match="partly missing rows"):
        bad = y.copy()
        bad[3, 1] = np.nan
        kalman.em(bad, 2)
    with pytest.raises(ValueError, match=r"obs must have shape \(T, D\)"):
        kalman.em(y[:, 0], 1)
    with pytest.raises(ValueError, match="at least 2 time steps"):
        kalman.em(y[:1], 1)
    with pytest.raises(ValueError, match="state_dim must be >= 1"):
        kalman.em(y, 0)
    with pytest.raises(ValueError, match=r"init_params\['F'\] must have shape"):
        kalman.em(y, 2, init_params={"F": np.eye(3)})
    with pytest.raises(ValueError, match="R must be positive definite"):
        kalman.em(y, 2, init_params={"R": -np.eye(4)})
    with pytest.raises(ValueError, match="unknown key"):
        kalman.em(y, 2, init_params={"A": np.eye(2)})
    with pytest.raises(ValueError, match="tol must be"):
        kalman.em(y, 2, tol=-1.0)
