"""The database layer: connections and their errors, the pool, the SQL loader, JSON payloads,
faults, migrations, grants and the embedded server.
"""
