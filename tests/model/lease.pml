/*
 * pgqueue's lease protocol, for the SPIN model checker (tests/model/test_model.py runs it).
 *
 * NRUNS runs of one queue with a concurrency limit of LIMIT, NWORKERS workers (one slot
 * each), an operator who may cancel one run, a rescuer, and the passing of time. Every
 * action is one SQL statement, one atomic step of the database; the comment after it
 * names the file it stands for. Anything may happen between two statements: a worker
 * may be delayed for any time (a lease may expire at any moment while a run is held),
 * may crash (CRASHES times in all) and lose what it held, and a completion or its answer
 * may be lost on the way (LOSSES times in all: the completer sends it again).
 *
 * A lease token is the attempt number of the claim that took it (every claim takes the
 * next one), 0 for none; a lease is valid while its run is running under that token and
 * has not expired.
 *
 * Safety (assertions, checked by `pan`):
 *   one_lease   at most one worker holds a valid lease on a run;
 *   fenced      no write (outcome, heartbeat) is accepted from a stale lease;
 *   one_end     a run enters a terminal state at most once;
 *   permits     bodies executing under a valid lease or a kept permit never exceed LIMIT
 *               (a body that outlived its lease holds no permit: its run was rescued).
 * Liveness (LTL `terminates`, checked by `pan -a -f`, under weak fairness): every run
 * reaches a terminal state.
 *
 * Broken variants (a -D macro each) must yield a counterexample:
 *   -DNOFENCE      complete.sql and renew_leases.sql without the lease check;
 *   -DEARLYPERMIT  a timed-out attempt's permit is not kept while its body runs on;
 *   -DNORESCUE     expired leases are never taken back (a crashed worker's run stays
 *                  `running` forever: `terminates` fails).
 */

#define NRUNS 2        /* the sums below are written out for two of each */
#define NWORKERS 2
#define LIMIT 1        /* the queue's concurrency */
#define MAXA 2         /* max_attempts */
#define MAXRENEW 1     /* renewals per attempt: every body ends */
#define CRASHES 1
#define LOSSES 1
#define NOBODY 255

mtype = { QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELED };

/* the database: pgqueue.runs and pgqueue.zombie_permits */
mtype state[NRUNS];
byte attempt[NRUNS];
byte token[NRUNS];          /* lease_token: the holding attempt's number; 0: none */
bool expired[NRUNS];        /* lease_expires_at <= now() */
byte holder[NRUNS];         /* worker_id */
byte ends[NRUNS];           /* times the run entered a terminal state */
byte zombies;               /* kept permits */

/* the workers */
bool body[NWORKERS];        /* its task body executes */
bool holding[NWORKERS];     /* it believes it holds a lease: it renews and will complete */
bool outlived[NWORKERS];    /* the lease of the attempt its body runs for expired */
bool zombie[NWORKERS];      /* a permit is kept for its body */
byte held_run[NWORKERS];   /* the run its attempt is of, and that attempt's token */
byte tok[NWORKERS];

byte crashes;
byte losses;

#define TERMINAL(r) (state[r] == SUCCEEDED || state[r] == FAILED || state[r] == CANCELED)
#define VALID(r, t) (state[r] == RUNNING && token[r] == t && t != 0 && !expired[r])
#ifdef NOFENCE
#define FENCE(r, t) true
#else
#define FENCE(r, t) VALID(r, t)
#endif

#define LIVE(r) (state[r] == RUNNING && !expired[r])
#define NVALID (LIVE(0) + LIVE(1))
#define EXECUTING(w) (body[w] && !outlived[w])
#define NEXECUTING (EXECUTING(0) + EXECUTING(1))
#define HOLDS_VALID(w, r) (holding[w] && held_run[w] == r && VALID(r, tok[w]))
#define DONE (TERMINAL(0) && TERMINAL(1))

ltl terminates { <> DONE }

/* a run enters a terminal state */
inline finish(r, s) {
    state[r] = s;
    ends[r]++;
    assert(ends[r] <= 1)                               /* one_end */
}

/* the run goes back to the queue, or fails for good once its attempts are used up */
inline retry_or_fail(r) {
    if
    :: attempt[r] >= MAXA -> finish(r, FAILED)
    :: else -> state[r] = QUEUED
    fi
}

inline release(r) {
    token[r] = 0;
    expired[r] = false;
    holder[r] = NOBODY
}

/* the worker's attempt of run r under token t writes its outcome: success, or failure */
inline complete(w, r, t) {
    if
    :: FENCE(r, t) ->
        assert(VALID(r, t));                           /* fenced */
        if
        :: finish(r, SUCCEEDED)
        :: retry_or_fail(r)
        fi;
        release(r)
    :: else -> skip                                    /* rejected: the lease was lost */
    fi
}

proctype worker(byte w) {
    byte r;
    byte renewals;
end_idle:
    do
    /* a free slot claims a queued run, if the queue has a permit left */
    :: atomic {
        (!body[w] && !holding[w] && NVALID + zombies < LIMIT
         && (state[0] == QUEUED || state[1] == QUEUED)) ->
        if
        :: state[0] == QUEUED -> r = 0
        :: state[1] == QUEUED -> r = 1
        fi;
        attempt[r]++;                                  /* sql/claim_limited.sql */
        state[r] = RUNNING;
        token[r] = attempt[r];
        expired[r] = false;
        holder[r] = w;
        held_run[w] = r;
        tok[w] = token[r];
        body[w] = true;
        holding[w] = true;
        outlived[w] = false;
        renewals = 0;
        assert(!HOLDS_VALID(1 - w, r));                /* one_lease */
        assert(NEXECUTING <= LIMIT)                    /* permits */
    }
    /* the lease keeper renews: a run missing from the answer was lost */
    :: atomic {
        holding[w] && renewals < MAXRENEW ->
        renewals++;
        if
        :: FENCE(held_run[w], tok[w]) -> assert(VALID(held_run[w], tok[w]))  /* sql/renew_leases.sql */
        :: else -> holding[w] = false
        fi
    }
    /* the body returns and its outcome is written */
    :: atomic {
        holding[w] && body[w] ->
        body[w] = false;
        complete(w, held_run[w], tok[w]);                   /* sql/complete.sql */
        if
        :: holding[w] = false
        :: losses < LOSSES -> losses++                 /* the answer was lost: sent again */
        fi
    }
    /* a completion sent again after its answer was lost */
    :: atomic {
        holding[w] && !body[w] ->
        complete(w, held_run[w], tok[w]);                   /* sql/complete.sql */
        holding[w] = false
    }
    /* the attempt times out while its body runs on: its permit is kept, then its
       failure is written; the body still executes */
    :: atomic {
        holding[w] && body[w] ->
#ifndef EARLYPERMIT
        if                                             /* sql/hold_zombie_permit.sql */
        :: !zombie[w] -> zombie[w] = true; zombies++
        :: else -> skip                                /* filed by a cancel already */
        fi
#else
        skip
#endif
    }
    ;
    atomic {
        complete(w, held_run[w], tok[w]);                   /* sql/complete.sql */
        holding[w] = false
    }
    /* a body that no longer holds its lease (lost, timed out, canceled) returns */
    :: atomic {
        body[w] && !holding[w] ->
        body[w] = false;
        if
        :: zombie[w] -> zombie[w] = false; zombies--   /* sql/release_zombie_permit.sql */
        :: else -> skip
        fi
    }
    /* the lease keeper drops a kept permit whose body has returned (one that the
       cancel filed while the body was ending) */
    :: atomic {
        zombie[w] && !body[w] ->
        zombie[w] = false;
        zombies--                                      /* sql/renew_leases.sql */
    }
    /* the worker dies: what it held is lost; its kept permits stop counting with its
       heartbeat */
    :: atomic {
        crashes < CRASHES ->
        crashes++;
        body[w] = false;
        holding[w] = false;
        if
        :: zombie[w] -> zombie[w] = false; zombies--   /* sql/functions/claim_limited.sql */
        :: else -> skip
        fi
    }
    od
}

/* the lease of run r expires; the body of the attempt it was for (if its worker still
   runs it) no longer holds a permit */
inline expire(r) {
    expired[r] = true;
    if
    :: (holder[r] != NOBODY && body[holder[r]] && held_run[holder[r]] == r
        && tok[holder[r]] == token[r]) -> outlived[holder[r]] = true
    :: else -> skip
    fi
}

/* time passes: a lease expires whenever its holder was delayed too long */
proctype clock() {
end_clock:
    do
    :: atomic { LIVE(0) -> expire(0) }
    :: atomic { LIVE(1) -> expire(1) }
    od
}

/* an expired lease is taken back; the lost attempt counts */
inline rescue(r) {
    retry_or_fail(r);
    release(r)
}

#ifdef NORESCUE
#define RESCUES false
#else
#define RESCUES true
#endif

proctype rescuer() {
end_rescuer:
    do
    :: atomic { RESCUES && state[0] == RUNNING && expired[0] -> rescue(0) }  /* sql/rescue_expired.sql */
    :: atomic { RESCUES && state[1] == RUNNING && expired[1] -> rescue(1) }  /* sql/rescue_expired.sql */
    od
}

/* an operator cancels one run, whatever its state; a running attempt's permit is kept
   for its body, which runs on until its worker sees the cancel */
proctype operator() {
    byte r;
    if
    :: skip
    :: atomic {
        (!TERMINAL(0) || !TERMINAL(1)) ->
        if
        :: !TERMINAL(0) -> r = 0
        :: !TERMINAL(1) -> r = 1
        fi;
        if
        :: (state[r] == RUNNING && holder[r] != NOBODY && body[holder[r]]
            && held_run[holder[r]] == r && tok[holder[r]] == token[r]
            && !outlived[holder[r]] && !zombie[holder[r]]) ->
            zombie[holder[r]] = true;                  /* sql/functions/cancel.sql */
            zombies++
        :: else -> skip
        fi;
        finish(r, CANCELED);                           /* sql/functions/cancel.sql */
        release(r)
    }
    fi
}

init {
    byte i;
    atomic {
        for (i : 0 .. NRUNS - 1) {
            state[i] = QUEUED;
            holder[i] = NOBODY
        }
        for (i : 0 .. NWORKERS - 1) {
            run worker(i)
        }
        run clock();
        run rescuer();
        run operator()
    }
}
