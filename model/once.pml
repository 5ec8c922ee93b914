/* mirrors: scripts/once_complete.lua 1f62dbd527e9237eda2a3e9c6acda8bd7990a81f */
/* mirrors: scripts/lock_refresh.lua 97de6635709500b52a125c2451b198118328d4bb */
/* mirrors: scripts/lock_release.lua 6b661eb34dd743f16c7cdc6e4d5e2e286b2c55e4 */
/* check: safety */
/* bug: BUG_ONCE_RECORD_BEFORE_DELETE safety -DREFUSALS=OOM_ONLY -DFAULTS=1 */
/* bug: BUG_ONCE_RECORD_BEFORE_DELETE safety -DREFUSALS=ACL_ONLY -DFAULTS=1 */
/* bug: BUG_ONCE_ANNOUNCE_CALL safety -DFAULTS=1 */
/* bug: BUG_ONCE_RESEND_UNRECOGNISED safety -DFAULTS=1 */
/* bug: BUG_ONCE_NO_RECHECK safety -DFAULTS=1 */
/* bug: HAZARD_DRIFT_BEYOND safety -DFAULTS=1 */

/*
 * Locker.Once on one job key (once.go), NCL clients, one call each
 * (see NOTES-once.md).
 *
 * A client calls Once at a time of its choosing: it reads the completion
 * record (GET) and returns "done" if there is one; otherwise it takes the
 * lock the way a try-once call does (the default retry strategy, NoRetry:
 * acquireOnce in store_redis.go, SET NX PX and, when that answers nil, GET
 * in a request of its own), checks that the reply came within the validity (settle in
 * attempt.go: otherwise deleteIfOwned and ErrLockLost), reads the record
 * again (a holder before it may just have completed: errAlreadyDone, then
 * Release), runs fn under a lease (renewed with lock_refresh.lua when one
 * interval of validity is left, lost at the Deadline whatever the network
 * does: the watchdog), and then, as runHeld in locker.go does: when fn
 * returned nil and the lock was not lost, once_complete.lua (record and
 * delete in one step); otherwise Release (lock_release.lua).
 *
 * Time as in semaphore.pml / NOTES-b.md: a tick only on timeout, times as
 * ticks left, a client lets a tick pass through its rest flag. The
 * Deadline is TTL - DRIFT from before the request was sent.
 *
 * Faults, one budget FAULTS shared by all: a client crashes (at its
 * obtain, while fn runs, before its complete or release); a request lands
 * a tick late, or after the lock's TTL (a pause); go-redis delivers a
 * request twice (the second a tick after the first, after its read
 * timeout; the reply is the second's); the client's clock lags so that its
 * Deadline falls as late as the drift allowance lets it (TTL after the
 * request); a write of once_complete.lua refused after the script's first
 * write: memory full (maxmemory, noeviction: Redis refuses the first write
 * of a script that needs memory, not those after a write) or a right taken
 * away (ACL: the second write, or the announcement, refused). Keys expire
 * with the server's ticks: the lock after TTL, the record after DONE_TTL
 * (WithDoneTTL).
 *
 * Properties (assertions):
 *  - once_mutex: at most one client runs fn before its Deadline (checked
 *    when a run starts, and at every tick);
 *  - once_done: a run never starts, nor goes on before its Deadline,
 *    while a completion record lives;
 *  - once_failed_unrecorded: a call that ran fn and returned an error (fn
 *    failed, the lock was lost, the complete was refused or found the
 *    lock gone) never had its record written;
 *  - once_recorded: a complete that finds its lock held writes the record
 *    unless a right refuses that very write (memory full does not stop it;
 *    what TestUnderMaxmemory asserts). A call that returns success has its
 *    record.
 */

#ifndef NCL
#define NCL 3
#endif
#define TTL 3
#define DRIFT 1
#ifndef DONE_TTL
#define DONE_TTL 4
#endif

#ifndef FAULTS
#define FAULTS 2
#endif
byte faults = FAULTS;

/* the kinds of refusal a fault may bring on once_complete.lua */
#define R_NONE 0
#define R_OOM  1     /* maxmemory: the script's first write that needs memory */
#define R_ACL2 2     /* a right taken away: the script's second write */
#define R_ACLP 3     /* no rights on the channel: the announcement */
#define ALL      0
#define OOM_ONLY 1
#define ACL_ONLY 2
#ifndef REFUSALS
#define REFUSALS ALL
#endif

/* Redis: the lock key (token: client + 1; 0: none) and its TTL left, the
   completion record (the token of the call that wrote it) and its TTL left */
byte lockv, lttl;
byte rec, rttl;

/* ghost: whose record was ever written */
bool everrec[NCL];

/* clients */
bool running[NCL];     /* fn runs */
byte dl[NCL];          /* ticks to the Deadline; 0: past (the lease lost) */
byte pdl[NCL];         /* the Deadline a request in flight would set */
byte paused[NCL];
bool rest[NCL];

hidden byte k, nvalid;

#define TOK(c) ((c) + 1)

/* A request's faults: late, very late, or delivered twice (again). */
inline send(c, again) {
  if
  :: faults > 0 -> faults--; paused[c] = 1
  :: faults > 0 -> faults--; paused[c] = TTL + 1
  :: faults > 0 -> faults--; again = true
  :: true
  fi
}

/* The Deadline a request sent now would give: TTL - DRIFT, or, with a
   lagging clock, as late as the allowance lets it. */
inline deadline(c) {
  pdl[c] = TTL - DRIFT;
  if
  :: faults > 0 -> faults--;
#ifndef HAZARD_DRIFT_BEYOND
     pdl[c] = TTL
#else
     pdl[c] = TTL + 1     /* drift beyond the allowance */
#endif
  :: true
  fi
}

/* once_mutex, at the start of c's run */
inline check_mutex(c) {
  k = 0;
  do
  :: k < NCL -> assert(k == c || !(running[k] && dl[k] > 0)); k++
  :: else -> break
  od;
  k = 0
}

/* acquireOnce's SET NX PX (r: 1 taken, 0 nil: the key is held) */
inline s_setnx(c, r) {
  if
  :: lockv == 0 -> lockv = TOK(c); lttl = TTL; r = 1
  :: else -> r = 0
  fi
}

/* lock_refresh.lua (no election value): PEXPIRE if the caller holds it */
inline s_refresh(c, r) {
  if
  :: lockv == TOK(c) -> lttl = TTL; r = 1
  :: else -> r = 0
  fi
}

/* lock_release.lua, nobody queued (try-once calls leave no entry): DEL if
   the caller holds it, announce (pcall) */
inline s_release(c) {
  if
  :: lockv == TOK(c) -> lockv = 0; lttl = 0
  :: else -> skip
  fi
}

/* once_complete.lua with refusal ref; r: 1, 0, or 2 (an error reply) */
inline s_complete(c, ref, r) {
  if
  :: lockv == TOK(c) ->
#ifndef BUG_ONCE_RECORD_BEFORE_DELETE
     /* redis.call('del', KEYS[1]): the first write, never refused for memory */
     lockv = 0; lttl = 0;
     /* redis.pcall('set', KEYS[2], ...): a write after a write, so memory
        does not stop it; a right may */
     if
     :: ref == R_ACL2 -> r = 2
     :: else -> rec = TOK(c); rttl = DONE_TTL; everrec[c] = true; r = 1
     fi;
#else
     /* the record first: redis.pcall('set'), the first write, refused
        when memory is full; then redis.call('del'), refused by a right
        taken away: the script stops there, the record written */
     if
     :: ref == R_OOM -> r = 2
     :: else -> rec = TOK(c); rttl = DONE_TTL; everrec[c] = true; r = 1
     fi;
     if
     :: ref == R_ACL2 -> r = 3    /* raised: the lock stays */
     :: else -> lockv = 0; lttl = 0
     fi;
     if :: r == 3 -> r = 2 :: else -> skip fi;
#endif
     /* once_recorded */
     assert(ref == R_ACL2 || rec == TOK(c));
     /* redis.pcall(ARGV[5], ARGV[4], ''): a refusal is ignored */
#ifdef BUG_ONCE_ANNOUNCE_CALL
     if :: ref == R_ACLP -> r = 2 :: else -> skip fi   /* redis.call: raised */
#else
     skip
#endif
  :: else ->
#ifndef BUG_ONCE_RESEND_UNRECOGNISED
     /* a resend whose first delivery did it: the record is this call's */
     if
     :: rec == TOK(c) -> r = 1
     :: else -> r = 0
     fi
#else
     r = 0
#endif
  fi
}

inline refusal(ref) {
  if
  :: faults > 0 && REFUSALS != ACL_ONLY -> faults--; ref = R_OOM
  :: faults > 0 && REFUSALS != OOM_ONLY -> faults--; ref = R_ACL2
  :: faults > 0 && REFUSALS != OOM_ONLY -> faults--; ref = R_ACLP
  :: true
  fi
}

proctype client(byte c) {
  byte r, ref;
  bool again, fnok;

  /* Once is called at a time of the caller's choosing */
  do
  :: atomic { !rest[c] -> rest[c] = true }
  :: atomic { !rest[c] -> break }
  od;

  /* the first read of the record (st.record: GET) */
  atomic { !rest[c] ->
    if
    :: rec != 0 -> goto done     /* (false, nil): done already */
    :: else -> skip
    fi }

  /* the obtain: try once (acquireOnce: SET NX PX, then GET if nil) */
  atomic { deadline(c); send(c, again) }
  atomic { paused[c] == 0 ->
    s_setnx(c, r);
    if :: again -> r = 0; paused[c] = 1 :: else -> skip fi }
  if
  :: again -> atomic { paused[c] == 0 -> again = false; s_setnx(c, r) }
  :: else -> skip
  fi;
  if
  :: r == 0 ->
     /* the key is held: read its holder, in a request of its own (the
        validity still counts from before the SET) */
     atomic { send(c, again) }   /* a GET delivered twice is the same GET */
     atomic { paused[c] == 0 ->
       again = false;
       if
       :: lockv == TOK(c) -> r = 1    /* its own token: a resend whose first delivery took it */
       :: else -> skip
       fi }
  :: else -> skip
  fi;
  atomic {
    if
    :: r == 0 -> pdl[c] = 0; goto done              /* ErrNotObtained */
    :: r == 1 && pdl[c] == 0 ->                     /* settle: the reply came past the validity */
       r = 0; s_release(c); goto done               /* deleteIfOwned; ErrLockLost */
    :: else -> r = 0; dl[c] = pdl[c]; pdl[c] = 0;
       printf("MSG: client %d obtains, Deadline in %d\n", c, dl[c])
    fi }

  /* held: a crash here leaves the lock to expire */
  if
  :: atomic { faults > 0 -> faults--; dl[c] = 0; goto done }
  :: true
  fi;

  /* the second read of the record, under the lock */
  atomic { send(c, again) }   /* a GET delivered twice is the same GET: again is ignored */
  atomic { paused[c] == 0 ->
    again = false;
#ifndef BUG_ONCE_NO_RECHECK
    if
    :: rec != 0 -> s_release(c); dl[c] = 0; goto done   /* errAlreadyDone: Release, (false, nil) */
    :: else -> skip
    fi;
#endif
    /* fn starts */
    running[c] = true;
    printf("MSG: client %d runs fn (record: %d)\n", c, rec);
    assert(dl[c] == 0 || rec == 0);     /* once_done */
    if :: dl[c] > 0 -> check_mutex(c) :: else -> skip fi }

  /* fn runs under the lease */
  do
  :: atomic { dl[c] == 0 -> running[c] = false; break }   /* lost: the lease context ends fn */
  :: atomic { !rest[c] && dl[c] > 0 -> running[c] = false; fnok = true; break }   /* fn returns nil */
  :: atomic { !rest[c] && dl[c] > 0 -> running[c] = false; break }                /* fn fails */
  :: atomic { !rest[c] && dl[c] > 0 && faults > 0 -> faults--; running[c] = false; dl[c] = 0; goto done }  /* crash */
  :: atomic { !rest[c] && dl[c] > 1 -> rest[c] = true }   /* fn goes on past a tick */
  :: atomic { !rest[c] && dl[c] == 1 -> deadline(c); send(c, again) }
     /* the renewal (renewOnce): lock_refresh.lua */
     atomic { paused[c] == 0 ->
       s_refresh(c, r);
       if :: again -> r = 0; paused[c] = 1 :: else -> skip fi }
     if
     :: again -> atomic { paused[c] == 0 -> again = false; s_refresh(c, r) }
     :: else -> skip
     fi;
     atomic {
       if
       :: r == 1 && dl[c] > 0 -> dl[c] = pdl[c]    /* the Deadline moves */
       :: r == 1 -> skip                           /* lost meanwhile: stays lost */
       :: else -> dl[c] = 0                        /* ErrNotHeld: lost */
       fi;
       r = 0; pdl[c] = 0 }
  od;

  /* after fn: a crash here leaves the lock to expire */
  if
  :: atomic { faults > 0 -> faults--; dl[c] = 0; goto done }
  :: true
  fi;

  if
  :: fnok && dl[c] > 0 ->
     /* finish: once_complete.lua */
     atomic { send(c, again); if :: !again -> refusal(ref) :: else -> skip fi;
       printf("MSG: client %d completes (resent %d, refusal %d: 1 memory, 2 second write, 3 announcement)\n", c, again, ref) }
     atomic { paused[c] == 0 ->
       s_complete(c, ref, r);
       if :: again -> r = 0; paused[c] = 1 :: else -> skip fi }
     if
     :: again -> atomic { paused[c] == 0 -> again = false; s_complete(c, ref, r) }
     :: else -> skip
     fi;
     atomic {
       dl[c] = 0;
       printf("MSG: client %d: complete answered %d (2: an error), lock %d, record %d\n", c, r, lockv, rec);
       if
       :: r == 1 -> assert(everrec[c] && rec == TOK(c))   /* (true, nil) */
       :: else -> assert(!everrec[c])                      /* once_failed_unrecorded */
       fi;
       r = 0; ref = 0; fnok = false; goto done }
  :: else ->
     /* Release (lock_release.lua); Once returns fn's error or ErrLockLost */
     atomic { send(c, again) }
     atomic { paused[c] == 0 ->
       s_release(c);
       if :: again -> paused[c] = 1 :: else -> skip fi }
     if
     :: again -> atomic { paused[c] == 0 -> again = false; s_release(c) }
     :: else -> skip
     fi;
     atomic {
       dl[c] = 0;
       printf("MSG: client %d released after fn failed or its lease was lost\n", c);
       assert(!everrec[c]);       /* once_failed_unrecorded */
       fnok = false; goto done }
  fi;
done:
  atomic { dl[c] = 0; pdl[c] = 0; r = 0; ref = 0; again = false; fnok = false; paused[c] = 0; rest[c] = false }
}

inline dec(x) {
  if
  :: x > 0 -> x--
  :: else -> skip
  fi
}

active proctype tick() {
end_t:
  do
  :: timeout ->
     atomic {
       /* once_mutex, once_done: before time moves on */
       k = 0; nvalid = 0;
       do
       :: k < NCL ->
          if
          :: running[k] && dl[k] > 0 -> nvalid++; assert(rec == 0 && lockv == TOK(k))
          :: else -> skip
          fi;
          k++
       :: else -> break
       od;
       assert(nvalid <= 1);
       printf("MSG: tick\n");
       dec(lttl);
       if :: lttl == 0 -> lockv = 0 :: else -> skip fi;
       dec(rttl);
       if :: rttl == 0 -> rec = 0 :: else -> skip fi;
       k = 0;
       do
       :: k < NCL -> dec(dl[k]); dec(pdl[k]); dec(paused[k]); rest[k] = false; k++
       :: else -> break
       od;
       k = 0; nvalid = 0
     }
  od
}

init {
  atomic {
    k = 0;
    do
    :: k < NCL -> run client(k); k++
    :: else -> break
    od;
    k = 0
  }
}
