"""The incident log: one SQLite database under cudadiag's home, shared by every kernel and
`cudadiag run` (docs/log.md).

database.py opens it (pragmas, schema, network filesystems); records.py writes and reads a
record's JSON; entry.py is what a listing needs of one incident; store.py is IncidentStore;
legacy.py imports the JSON-lines logs of earlier versions once; retention.py says what is
kept; runfiles.py keeps an isolated run's files beside the log; query.py, stats.py,
view.py, listing.py and options.py are the `incidents` command.
"""
