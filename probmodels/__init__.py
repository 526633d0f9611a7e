"""The model library: Bayesian models as plain NumPyro programs (data as arguments, observations
as keywords defaulting to ``None``, hyperparameters keyword-only with documented defaults)."""

from probmodels import conjugate, graphs
from probmodels.bayes_net import bayes_net, logistic_cpd, noisy_or
from probmodels.gp import bayes_machine, gp_classifier, gp_regression
from probmodels.experts import mixture_of_experts
from probmodels.factor import factor_analysis, ppca
from probmodels.ibp import ibp_linear_gaussian
from probmodels.hmm import hmm
from probmodels.lda import lda
from probmodels.lds import lds
from probmodels.mixtures import dp_mixture, gaussian_mixture
from probmodels.regression import (linear_regression, logistic_regression, ordinal_regression, probit_regression,
                                   robust_regression)
from probmodels.spike_slab import spike_and_slab_probit, spike_and_slab_regression

__all__ = ["bayes_machine", "bayes_net", "conjugate", "graphs", "logistic_cpd", "noisy_or", "dp_mixture", "gaussian_mixture", "gp_classifier", "gp_regression", "hmm", "lda", "lds", "linear_regression", "logistic_regression", "ordinal_regression", "probit_regression", "robust_regression",
           "spike_and_slab_probit", "spike_and_slab_regression",
           "mixture_of_experts", "factor_analysis", "ppca", "ibp_linear_gaussian"]
