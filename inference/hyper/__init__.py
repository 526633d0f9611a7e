"""Hyperparameters learnt from the evidence (type-II MAP) or integrated over (INLA-style).

A hyperparameter is an ordinary NumPyro sample site with a proper prior: a kernel's lengthscale
or variance given as a distribution (``RBF(lengthscale=dist.LogNormal(0.0, 1.0))``, see
`probmodels.kernels`), GP regression's ``noise=dist.HalfNormal(1.0)``, or any site a user's model
draws with ``numpyro.sample`` and feeds into the prior of its latent Gaussian or into its
likelihood. `sites.find` tells them apart from the latent Gaussian (the Normal / multivariate
normal sites nothing else depends on). ``inference.laplace(model, ..., hyper=...)`` and
``inference.ep(model, ..., hyper=...)`` then take

- ``hyper=None`` (default): today's behaviour, nothing special: Laplace is one joint Gaussian
  over every continuous site in unconstrained space (hyperparameters included, e.g. linear
  regression's ``precision``); MCMC and VI always treat hyperparameter sites as ordinary
  latents, sampled or fitted jointly with the rest;
- ``hyper="map"``: ``theta* = argmax log Z(theta) + log p(theta)`` in the unconstrained space
  ``phi`` of the supports (the Jacobian included: the mode of ``p(phi | y)``) by BFGS on the
  exact gradient of the Laplace evidence (`laplace_evidence`), the latent's mode warm-started
  between steps; the draws hold the hyperparameters at ``theta*``;
- ``hyper="integrate"``: ``p(phi | y)`` integrated on a design around that mode (a grid for one
  or two hyperparameters, a central composite design for more, `design`), each point's latent
  posterior weighted by its mass; draws come from the mixture and ``log_evidence`` is the
  integral ``log p(y)``.

``diagnostics["hyper"]``: ``sites``, ``values`` (constrained, at the mode), ``unconstrained``,
``grad_norm``, ``iterations``, ``evaluations``, ``trace`` (``log Z + log p`` at each accepted
step), ``log_evidence_at_mode``, ``converged``; with ``"integrate"`` also ``design``, ``points``,
``hessian`` and ``weights``. ``diagnostics["converged"]`` is False when the search did not
converge (the gain left, ``g' H^-1 g / 2``, above ``tol`` with the Hessian itself, by central
differences, not only with BFGS's estimate: `optimize.maximize`), an evaluation failed, or a
draw's density is not finite.

The engine's side (how EP plugs in)
-----------------------------------
The search, the design and the draws are engine-agnostic (`fit.programs`, `fit.run`). An engine
provides two traceable functions of the flat unconstrained hyperparameters ``phi`` (shape
``(k,)``; `sites.run` substitutes them into the model) and of ``data`` (the model's array
arguments, rebuilt by `inference.compiled`):

``evidence(phi, warm, data) -> (log_z, (new_warm, ok))``
    ``log_z``: the engine's ``log p(y | theta(phi))`` (scalar) with the engine's fixed point
    (Laplace's mode; EP's site parameters) run from ``warm`` on ``stop_gradient(phi)``, so that
    ``jax.grad`` in ``phi`` gives the exact gradient of the converged approximation: for EP, the
    gradient of EP's log Z with the converged sites held fixed (stop-gradient'ed; by stationarity
    of log Z in the sites this is the total derivative, as GPML computes it). ``warm`` is a
    pytree of arrays of fixed shapes (Laplace: ``a = S^-1 (x - m)``; EP: the site natural
    parameters) and ``new_warm`` the converged state, same structure; ``ok`` a bool scalar:
    the fixed point converged and ``log_z`` is finite. Do not add ``log p(theta)``: the
    driver adds `sites.log_prior`.
``draw(phi, warm, key, num, data) -> (x, log_q)``
    ``num`` draws (static) of the flat latent ``x`` (the latent sites in model order, each
    raveled; shape ``(num, d)``) from the engine's Gaussian approximation at ``phi`` given the
    converged ``warm``, and their log density under it (``(num,)``).

plus the starting ``warm0``. `fit.programs(model, hs, model_inputs, evidence, draw, unravel, num)`
jits them; `fit.run(...)` returns the `Posterior` (``engine="ep"``, ``evidence_method``
``"ep-map"`` / ``"ep-integrated"``). See `laplace_fit.laplace_hyper` for the whole wiring.

EP is wired (`ep_fit.ep_hyper`, ``inference.ep(..., hyper=...)``) for hyperparameters of the
latent Gaussian's prior (kernel parameters, a weight prior's scale) and of Gaussian likelihoods (a
noise level): EP's recognition of the likelihood is concrete, so it is done once and compared at
a second hyperparameter value; a Gaussian site group that changed is read again at every value
(its log likelihood and two derivatives), any other likelihood that depends on a hyperparameter
(a Student-t's scale) is refused with a ValueError naming the site, and Laplace's ``hyper=``
handles it. With ``hyper=None`` EP refuses a
model with hyperparameter sites, naming them and the options. The Bayes machine's own EP is wired
too (`bm_fit.bm_hyper`): its noise rate stays with EP, and since its log Z is not stationary in
its sites (clipped site precisions, the Beta's mean-and-variance matching) the evidence adds the
sites' implicit derivative (an adjoint fixed-point iteration of the EP update's VJP).

Example:
    >>> import numpy as np, numpyro.distributions as dist, inference
    >>> from probmodels import gp_regression
    >>> from probmodels.kernels import RBF
    >>> X = np.linspace(-2, 2, 15)[:, None]; y = np.sin(2 * X[:, 0])
    >>> post = inference.laplace(gp_regression, X, y, kernel=RBF(dist.LogNormal(0.0, 1.0)), noise=0.1,
    ...                          hyper="map", num_samples=20)
    >>> post.diagnostics["hyper"]["sites"], post.evidence_method, post.samples["lengthscale"].shape
    (['lengthscale'], 'laplace-map', (1, 20))
"""

from inference.hyper.sites import OPTIONS, HyperSites, check_option, find

__all__ = ["OPTIONS", "HyperSites", "check_option", "find"]
