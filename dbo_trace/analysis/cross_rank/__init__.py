"""How the ranks stood to one another: their traces on one clock, each collective's wait for its peers
and the k-th step of every rank side by side."""
