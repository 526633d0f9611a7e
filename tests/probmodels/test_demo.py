"""probmodels.demo: the report shows each fit's ``diagnostics["converged"]``, so a short run whose
R-hat or ESS fails is marked rather than read as a reference (the demo's own NUTS runs of the
Bayes machine had R-hat 1.31 and ESS 6 in a report that did not say so)."""

from probmodels import demo

ROW = {"model": "m", "engine": "mcmc", "time_s": 1.0, "log_evidence": None, "evidence_method": None,
       "agreement": None, "metric": "accuracy", "text": "97%"}


def test_the_table_marks_fits_that_did_not_converge():
    rows = [dict(ROW, converged=True), dict(ROW, model="n", converged=False), dict(ROW, model="o", converged=None),
            {"model": "p", "engine": "vi", "error": "ValueError: bad", "trace": "Traceback"}]
    lines = demo.format_table(rows).splitlines()
    assert "converged" in lines[0]
    cells = {ln.split()[0]: ln.split()[3] for ln in lines[2:]}
    assert cells == {"m": "yes", "n": "NO", "o": "-", "p": "-"}
    assert "FAILED ValueError: bad" in lines[-1]
    assert "`converged`" in demo.report(rows, ".")


def test_a_demo_row_carries_the_fits_converged_flag(tmp_path):
    (row,) = demo.run(str(tmp_path), only=["linear_regression"], engines=["laplace"], quiet=True, plots=False)
    assert row["converged"] is True and " yes " in demo.format_table([row])
