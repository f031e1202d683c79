"""The docs' Benchmarks page, built from the results files by ``benchmarks/report.py``: the headline table,
one section per question (request path, judgment, detector, fleet) and the plots."""
