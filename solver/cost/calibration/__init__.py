"""Fitting calibration profiles to published measurements: the points, what each measures, the fit."""
