"""The eight-schools data (Rubin 1981) and its centred model, shared by the VI and Laplace tests."""

import numpy as np
import numpyro
import numpyro.distributions as dist

SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def centred_schools(sigma, y=None):
    """NumPyro's priors: mu ~ N(0, 5), tau ~ HalfCauchy(5), theta_j ~ N(mu, tau) (centred)."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("school", len(sigma)):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)
