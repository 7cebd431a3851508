-- `pgqueue uninstall`: the schema and everything in it (tables, views, functions, types).
DROP SCHEMA pgqueue CASCADE
