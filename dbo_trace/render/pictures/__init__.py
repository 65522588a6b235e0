"""The pictures: a step (and the k-th step of every rank) laid out as lanes and bars, and drawn."""
