"""A disaggregated (AFD) run: the roles and where they came from, the attention side's round trips, the
FFN's compute per step, how the pair shared a GPU and DBO's effect taken apart by part."""
