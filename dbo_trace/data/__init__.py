"""Data dbo-trace ships: the default calibration of --what-if dbo (commands/calibration.py)."""
