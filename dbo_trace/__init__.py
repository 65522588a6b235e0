"""dbo-trace: profiling and overlap diagnosis for dual-batch overlap (DBO) in vLLM."""

__version__ = "0.2.0"
