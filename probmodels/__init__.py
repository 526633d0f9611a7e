"""The model library: Bayesian models as plain NumPyro programs (data as arguments, observations
as keywords defaulting to ``None``, hyperparameters keyword-only with documented defaults)."""

from probmodels import conjugate
from probmodels.regression import linear_regression, logistic_regression, probit_regression

__all__ = ["conjugate", "linear_regression", "logistic_regression", "probit_regression"]
