"""Do exported programs compute lgamma and digamma as traced ones do? A traced program calls the
CPU FFI kernel (`cpu_lgamma_ffi`); an exported one lowers the portable implementation (RESULTS.md,
"Exported programs off in the test suite"). Values on 6002 points in [1e-6, 1e6], against each
other and against SciPy, in machine epsilons relative to max(|value|, 1).

    .venv/bin/python benchmarks/exported_lgamma.py f64   # or f32
"""
import numpy as np, jax, jax.numpy as jnp, sys
from jax import export
from scipy.special import gammaln, digamma
x64 = sys.argv[1] == "f64"
jax.config.update("jax_enable_x64", x64)
dt = np.float64 if x64 else np.float32
xs = np.concatenate([np.geomspace(1e-6, 1e6, 4001), np.linspace(0.5, 3, 2001)]).astype(dt)
for name, f, ref in [("lgamma", jax.scipy.special.gammaln, gammaln), ("digamma", jax.scipy.special.digamma, digamma)]:
    traced = np.asarray(jax.jit(f)(xs), np.float64)
    exp = export.export(jax.jit(f))(jax.ShapeDtypeStruct(xs.shape, xs.dtype))
    exported = np.asarray(jax.jit(exp.call)(xs), np.float64)
    exact = ref(xs.astype(np.float64))
    scale = np.maximum(np.abs(exact), 1.0)
    eps = np.finfo(dt).eps
    print(sys.argv[1], name, "traced vs exported max rel (eps units):", np.max(np.abs(traced - exported) / scale) / eps,
          "| traced vs scipy:", np.max(np.abs(traced - exact) / scale) / eps, "| exported vs scipy:", np.max(np.abs(exported - exact) / scale) / eps)
