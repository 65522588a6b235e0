"""A GPU workload with known ground truth: two microbatches ping-ponging through vLLM's DBO machinery."""
