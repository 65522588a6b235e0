"""How the microbatches overlapped: why comm was exposed, comm held back (and what its holder
occupied per SM), what overlap cost in kernel time, the comm operations and the layer each belongs
to, each microbatch's busy stretches and how long launched work queued."""
