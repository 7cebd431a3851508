-- pgqueue 0003: schedules, inspection views, retention (filled in by the schedules/operations work).
SELECT 1;
