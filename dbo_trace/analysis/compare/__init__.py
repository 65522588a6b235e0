"""Runs side by side: the arms of an ablation, a load sweep summarised and the unprofiled timing."""
