-- The thread of an attempt filed by hold_zombie_permit.sql returned: its permit is free.
DELETE FROM pgqueue.zombie_permits WHERE lease_token = %(lease_token)s::uuid
