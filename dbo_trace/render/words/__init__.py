"""The sentences: every headline, reason and next step of a verdict, and the notes (the host-time line,
the cross-rank lines, a rank's notes, the run's warnings), written from the typed figures analysis hands over."""
