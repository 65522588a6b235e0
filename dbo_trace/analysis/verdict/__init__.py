"""Does DBO pay here, and why: the evidence a verdict reads and the one decision made from it."""
