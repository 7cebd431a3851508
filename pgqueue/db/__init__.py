"""The database layer: the Database (database.py: an App's settings and pools), connections
and their errors, the pool, the SQL loader, JSON payloads, faults, migrations, grants and the
embedded server.
"""
