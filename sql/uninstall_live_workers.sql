-- Live workers, for `pgqueue uninstall` to refuse while any would lose its schema.
SELECT host, pid FROM pgqueue.workers_live ORDER BY host, pid
