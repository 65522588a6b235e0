"""`dbo-trace demo`: a DBO workload whose truth is known by construction, recorded and diagnosed end to end."""
