/* mirrors: scripts/multi_obtain.lua f59073797094c61c61a63e85e12b3589150eca70 */
/* mirrors: scripts/multi_release.lua 4a891c4bd1762c031551a3ba45a22afed9254440 */
/* mirrors: scripts/lib_queue.lua aaaff9dc8b3b288069c097f9c47e8f84e5dcc5d6 */
/* mirrors: scripts/lock_obtain.lua 6f3d9912181d1c895a8ea1e4c496d306fa740e95 */
/* mirrors: scripts/lock_release.lua 6b661eb34dd743f16c7cdc6e4d5e2e286b2c55e4 */
/* check: safety */
/* bug: BUG_SET_ARRIVAL_TIES safety -DFAULTS=0 */
/* bug: BUG_SET_NO_ONE_ARRIVAL safety -DFAULTS=0 */
/* check: safety -DHAZARD_LATE_RESEND -DFAULTS=1 */
/* bug: BUG_RESEND_HELD_KEPT safety -DHAZARD_LATE_RESEND */
/* bug: BUG_SET_RESEND_NO_LAPSE_CHECK safety -DHAZARD_LATE_RESEND -DFAULTS=1 */
/*
 * Sets of locks (Locker.ObtainAll, multi.go; see NOTES-multi.md): two
 * sets, 0 and 1, each on both keys k0 and k1, and two single-key clients,
 * 2 on k0 and 3 on k1, each with a waiting Obtain; every client in a
 * Locker of its own, all on one server (one Cluster slot).
 *
 * Redis (one atomic step per script, the same reads, writes and refusals
 * in the same order): multi_obtain.lua (mode '2', a waiting set),
 * multi_release.lua (a set's release, and its withdrawal with its entry),
 * lock_obtain.lua and lock_release.lua (queued, single keys), and
 * lib_queue.lua's pop_entry under both releases. A handoff queue is its
 * members: per client an entry, its 'a:' score (the arrival) and its 'l:'
 * score (when it lapses), and the 'h:<arrival>' record (score 0) of the
 * set a release last handed the key to; the queue key has its own expiry
 * (PEXPIRE at each queuing, none when a record re-creates it), and goes
 * when its last member does. Queues order entries by arrival, then by the
 * member string: a fixed rank per token (TOKEN below).
 *
 * Time: the server's clock `now`, in ticks (ms), from 1 to TMAX; the tick
 * may come between any two steps, or not: any number of scripts can run
 * in one ms (the case that deadlocked for real). Keys expire at their
 * absolute expiry, queue keys at theirs; entries lapse when their 'l:'
 * time is reached. Arrivals are the server's clock, raised as the script
 * raises them.
 *
 * Clients: a set mirrors setAcquisition (send, learn, plan, handedOver,
 * startOver, leave, finish); a single-key client acquire.go's loop at the
 * level that matters here (attempt, wait for a handoff or a release or
 * its retry slot, hold, release). Both retry at the end of each slot (a
 * tick) and when a release of a key they wait for is announced.
 *
 * Faults, one budget FAULTS (2 by default): a set's attempt delivered
 * twice (its reply lost, go-redis sends it again; the second delivery
 * lands later and its reply is read), a reply lost without resend (an
 * error: the set withdraws), a ctx that ends while a set waits (it
 * withdraws). By default a resend lands before the entries its first
 * delivery wrote can lapse (LIFE: go-redis's read timeout, 3s, is under
 * queueEntryLife, 5s); HAZARD_LATE_RESEND lifts that bound.
 *
 * Properties (assertions):
 *  - mutex (tick, grant): no key has two clients holding it before their
 *    deadlines, and the one that does is the key's holder in Redis,
 *    unexpired;
 *  - all_or_nothing (return): a set that returns success holds every key
 *    in Redis, unexpired; one that returns failure, once its withdrawal
 *    landed, holds none and has no entry in any queue;
 *  - no_deadlock (timeout, when nothing else can move): never two sets,
 *    both waiting, each holding a key that the other waits for with a
 *    live entry in its queue (so that neither's next attempt would start
 *    over: each would renew and wait for ever).
 *
 * Bug switches: BUG_SET_ARRIVAL_TIES (the first queued attempt takes
 * arrival = now, without the 'h:' raise), BUG_SET_NO_ONE_ARRIVAL (each
 * queue raised on its own: the entries of one set with different
 * arrivals), BUG_SET_RESEND_NO_LAPSE_CHECK (a resent first attempt is not
 * recognised: it takes a new arrival and skips the lapse check), and
 * BUG_RESEND_HELD_KEPT (the scripts before this model: a resend that
 * lands after the first delivery's entries lapsed, finding no entry of
 * the set but a key handed to it, took a new arrival while the set held
 * that key, and deadlocked two sets; found by this model, NOTES-multi.md
 * Findings; now such an attempt answers lapsed and the set starts over).
 * HAZARD_LATE_RESEND lets a resend land that late.
 */

#define NSET 2
#define NSGL 2
#define NC (NSET + NSGL)
#define NK 2
#define ALLK 3                   /* the keys of a set: k0 and k1 */
#define TTL 3
#define DRIFT 1
#define VALID (TTL - DRIFT)
#define LIFE 2                   /* an entry lapses LIFE ticks after it was last written (queueEntryLife) */
#ifndef TMAX
#define TMAX 4
#endif
#ifndef FAULTS
#define FAULTS 2
#endif
#define MAXGEN 2                 /* tokens per set: one start over */

#define SKEY(c) ((c) - NSET)     /* the key of single-key client c */
#define KS(c) ((c) < NSET -> ALLK : (1 << SKEY(c)))
#define HAS(m, k) (((m) >> (k)) & 1)
#define TOKEN(c, g) ((c) < NSET -> 1 + (c) * MAXGEN + (g) : 1 + NSET * MAXGEN + (c) - NSET)
#define ISSET(t) ((t) >= 1 && (t) <= NSET * MAXGEN)
#define Q(k, c) ((k) * NC + (c))

/* phases of a client */
#define P_TRY 0
#define P_WAIT 1
#define P_HOLD 2
#define P_DONE 3

byte now = 1;
byte faults = FAULTS;

/* Redis: each key, its queue */
byte holder[NK];                 /* the token, 0: absent */
byte kexp[NK];                   /* when it expires */
byte qa[NK * NC];                /* client c's entry in key k's queue: its 'a:' score, 0: none */
byte ql[NK * NC];                /* its 'l:' score (negated): when it lapses */
byte hrec[NK];                   /* the 'h:<arrival>' record, 0: none */
byte qexp[NK];                   /* when the queue key expires, 0: no expiry */

/* announcements, and the Lockers' wake-ups */
bool ann[NK * NC];               /* a handoff to client c's current token, unheard */
bool wake[NC];                   /* a release heard, or a slot ended (due), for a waiter */
bool due[NC];

/* each client */
byte phase[NC];
byte tokc[NC];                   /* its current token */
byte gen[NC];
byte arrc[NC];                   /* s.arrival */
byte hmask[NC];                  /* the keys it holds, as it knows (s.at[i].held) */
byte tmask[NC];                  /* taken at its last attempt (s.at[i].taken) */
byte basis[NK * NC];
byte qsince[NC];                 /* its first queued attempt (the waiter's since), 0: none */
bool confirm[NC];
bool restart[NC];
byte dl[NC];                     /* its deadline, once it holds */

/* the reply of the last delivery */
bool rwon[NC];
bool rlap[NC];
byte rarr[NC];
byte rmine[NC];
byte rtaken[NC];

hidden byte k, j, x, n, b, arr, lap, oth, ti;
bool deadlock;                   /* scratch of no_deadlock (always false in a stored state) */

inline qempty(kk) {
  /* x = 1 when the queue of kk has no member */
  x = (hrec[kk] == 0);
  j = 0;
  do
  :: j < NC -> x = x && (qa[Q(kk, j)] == 0); j++
  :: else -> break
  od;
  j = 0
}

/* ZREM 'a:'..entry, 'l:'..entry; an emptied queue key is gone */
inline qrem(kk, cc) {
  if
  :: qa[Q(kk, cc)] > 0 ->
     qa[Q(kk, cc)] = 0; ql[Q(kk, cc)] = 0;
     qempty(kk);
     if
     :: x -> qexp[kk] = 0
     :: else -> skip
     fi;
     x = 0
  :: else -> skip
  fi
}

/*
 * lib_queue.lua pop_entry(q, now): b is the client whose entry is popped
 * (+ 1), 0 when none is left.
 */
inline pop_entry(kk) {
  hrec[kk] = 0;                                   /* 20-22 drop the 'h:' records */
  j = 0;
  do                                              /* 23-25 drop the lapsed entries */
  :: j < NC ->
     if
     :: qa[Q(kk, j)] > 0 && ql[Q(kk, j)] <= now -> qa[Q(kk, j)] = 0; ql[Q(kk, j)] = 0
     :: else -> skip
     fi;
     j++
  :: else -> break
  od;
  b = 0;                                          /* 27 the first by (score, member) */
  j = 0;
  do
  :: j < NC ->
     if
     :: qa[Q(kk, j)] > 0 && (b == 0 || qa[Q(kk, j)] < qa[Q(kk, b - 1)] ||
          (qa[Q(kk, j)] == qa[Q(kk, b - 1)] && tokc[j] < tokc[b - 1])) -> b = j + 1
     :: else -> skip
     fi;
     j++
  :: else -> break
  od;
  if
  :: b > 0 ->
     arr = qa[Q(kk, b - 1)];
     qa[Q(kk, b - 1)] = 0; ql[Q(kk, b - 1)] = 0   /* 32 ZREM */
  :: else -> skip
  fi;
  qempty(kk);                                     /* an emptied queue key is gone */
  if
  :: x -> qexp[kk] = 0
  :: else -> skip
  fi;
  x = 0;
  if
  :: b > 0 && ISSET(tokc[b - 1]) -> hrec[kk] = arr   /* 35-37 ZADD q 0 'h:'..arrival (on a key
                                                     gone, a new one without expiry) */
  :: else -> skip
  fi;
  arr = 0
}

/* hand key kk on (multi_release.lua 66-76, lock_release.lua 57-67: pop_entry, SET token PX
   ttl, announce) or delete it (75-76, 64-65: DEL, announce '') */
inline hand_on(kk) {
  qempty(kk);
  if
  :: !x ->                                        /* the queue exists */
     x = 0;
     pop_entry(kk)
  :: else -> x = 0; b = 0
  fi;
  if
  :: b > 0 ->
     printf("t=%d   k%d handed to tok %d (h: %d)\n", now, kk, tokc[b - 1], hrec[kk]);
     holder[kk] = tokc[b - 1]; kexp[kk] = now + TTL;
     ann[Q(kk, b - 1)] = true;                    /* "<ttl> <fence> <token>" */
     b = 0
  :: else ->
     printf("t=%d   k%d deleted\n", now, kk);
     holder[kk] = 0; kexp[kk] = 0;                /* DEL, announce '' */
     j = 0;
     do
     :: j < NC ->
        if
        :: phase[j] == P_WAIT && HAS(KS(j), kk) -> wake[j] = true
        :: else -> skip
        fi;
        j++
     :: else -> break
     od;
     j = 0
  fi
}

/*
 * multi_obtain.lua, mode '2', for set c (token tokc[c], ARGV[8] = arrc[c]);
 * the reply in rwon, rlap, rarr, rmine, rtaken.
 */
inline multi_obtain(c) {
  d_step {
    oth = 0; n = 0;
    k = 0;
    do                                            /* 80-91 GET every key */
    :: k < NK ->
       if
       :: holder[k] == tokc[c] -> n = n | (1 << k)
       :: holder[k] != 0 && holder[k] != tokc[c] && oth == 0 -> oth = k + 1
       :: else -> skip
       fi;
       k++
    :: else -> break
    od;
    if
    :: oth == 0 ->                                /* 92-113 every key: SET PX, ZREM the entry */
       k = 0;
       do
       :: k < NK -> holder[k] = tokc[c]; kexp[k] = now + TTL; qrem(k, c); k++
       :: else -> break
       od;
       rwon[c] = true; rmine[c] = n; rtaken[c] = 0; rlap[c] = false; rarr[c] = 0
    :: else ->
       rwon[c] = false; rmine[c] = n;
       arr = arrc[c];                             /* 120 */
#ifndef BUG_SET_RESEND_NO_LAPSE_CHECK
       if
       :: arr == 0 ->                             /* 121-133 a resend: ZSCORE 'a:', the arrival its entries have */
          k = 0;
          do
          :: k < NK && !HAS(n, k) && qa[Q(k, c)] > 0 -> arr = qa[Q(k, c)]; break
          :: k < NK && !(!HAS(n, k) && qa[Q(k, c)] > 0) -> k++
          :: else -> break
          od
       :: else -> skip
       fi;
#endif
       lap = 0; rtaken[c] = 0;
       k = 0;
       do                                         /* 134-151 held, ZSCORE 'l:': the lapse check */
       :: k < NK ->
          if
          :: !HAS(n, k) ->
             if
             :: holder[k] != 0 -> rtaken[c] = rtaken[c] | (1 << k)
             :: else -> skip
             fi;
             if
             :: arr != 0 && (qa[Q(k, c)] == 0 || ql[Q(k, c)] <= now) -> lap = 1
             :: else -> skip
             fi
          :: else -> skip
          fi;
          k++
       :: else -> break
       od;
#ifndef BUG_RESEND_HELD_KEPT
       /* 152-159: a first attempt that finds a key holding its token is a
          resend whose entries are gone: it has lost its place (before the
          fix, BUG_RESEND_HELD_KEPT, it queued again with a new arrival
          while it held that key) */
       if
       :: arr == 0 && n != 0 -> lap = 1
       :: else -> skip
       fi;
#endif
       if
       :: lap == 1 ->                             /* 160-162 lapsed: nothing written */
          rlap[c] = true; rarr[c] = arr
       :: else ->
          rlap[c] = false;
#ifndef BUG_SET_NO_ONE_ARRIVAL
          if
          :: arr == 0 ->                          /* 163-180 now, raised above the 'h:' records (ZRANGEBYSCORE 0 0) */
             arr = now;
#ifndef BUG_SET_ARRIVAL_TIES
             k = 0;
             do
             :: k < NK ->
                if
                :: holder[k] != 0 && !HAS(n, k) && hrec[k] != 0 && hrec[k] >= arr -> arr = hrec[k] + 1
                :: else -> skip
                fi;
                k++
             :: else -> break
             od;
#endif
             skip
          :: else -> skip
          fi;
          k = 0;
          do                                      /* 182-190 */
          :: k < NK ->
             if
             :: HAS(n, k) -> kexp[k] = now + TTL              /* PEXPIRE */
             :: else ->
                if
                :: qa[Q(k, c)] == 0 -> qa[Q(k, c)] = arr      /* ZADD NX 'a:' */
                :: else -> skip
                fi;
                ql[Q(k, c)] = now + LIFE;                     /* ZADD 'l:' */
                qexp[k] = now + LIFE                          /* PEXPIRE queue */
             fi;
             k++
          :: else -> break
          od;
          rarr[c] = arr
#else
          /* each queue raised on its own (first attempt): one set, several arrivals */
          k = 0;
          do
          :: k < NK ->
             if
             :: HAS(n, k) -> kexp[k] = now + TTL
             :: else ->
                x = arr;
                if
                :: x == 0 ->
                   x = now;
                   if
                   :: holder[k] != 0 && hrec[k] != 0 && hrec[k] >= x -> x = hrec[k] + 1
                   :: else -> skip
                   fi
                :: else -> skip
                fi;
                if
                :: qa[Q(k, c)] == 0 -> qa[Q(k, c)] = x
                :: else -> skip
                fi;
                ql[Q(k, c)] = now + LIFE;
                qexp[k] = now + LIFE;
                rarr[c] = x; x = 0
             fi;
             k++
          :: else -> break
          od
#endif
       fi
    fi;
    printf("t=%d set %d tok %d multi_obtain: won %d mine %d lapsed %d arrival %d\n",
           now, c, tokc[c], rwon[c], rmine[c], rlap[c], rarr[c]);
    k = 0; n = 0; oth = 0; arr = 0; lap = 0
  }
}

/*
 * multi_release.lua for client c's token, with its entry (withdraw) or
 * without (Release).
 */
inline multi_release(c, withdraw) {
  d_step {
    printf("t=%d set %d tok %d multi_release (withdraw %d)\n", now, c, tokc[c], withdraw);
    k = 0;
    do                                            /* 58-80 EXISTS of the queues, GET; 86-88 DEL of the keys owned with no queue; 91-93 ZREM the caller's entry; 94-113 each key owned */
    :: k < NK ->
       if
       :: withdraw -> qrem(k, c)
       :: else -> skip
       fi;
       if
       :: holder[k] == tokc[c] -> hand_on(k)
       :: else -> skip
       fi;
       k++
    :: else -> break
    od;
    k = 0
  }
}

/* lock_obtain.lua (queued) for single-key client c on key kk */
inline lock_obtain(c, kk) {
  d_step {
    printf("t=%d single %d tok %d lock_obtain k%d (holder tok %d)\n", now, c, tokc[c], kk, holder[kk]);
    if
    :: holder[kk] == 0 ->                         /* 66 SET NX PX; won(true) */
       holder[kk] = tokc[c]; kexp[kk] = now + TTL; qrem(kk, c); rwon[c] = true
    :: holder[kk] == tokc[c] ->                   /* 69-75 ours: PEXPIRE, won(false) */
       kexp[kk] = now + TTL; qrem(kk, c); rwon[c] = true
    :: else ->                                    /* 78-88 ZADD NX 'a:' now, 'l:', PEXPIRE queue */
       if
       :: qa[Q(kk, c)] == 0 -> qa[Q(kk, c)] = now
       :: else -> skip
       fi;
       ql[Q(kk, c)] = now + LIFE; qexp[kk] = now + LIFE;
       rwon[c] = false
    fi
  }
}

/* lock_release.lua (queued, without the entry) for single-key client c */
inline lock_release(c, kk) {
  d_step {
    printf("t=%d single %d tok %d lock_release k%d\n", now, c, tokc[c], kk);
    if
    :: holder[kk] == tokc[c] -> hand_on(kk)
    :: else -> skip
    fi
  }
}

/* mutex, at a grant and at each tick */
inline mutex_check() {
  k = 0;
  do
  :: k < NK ->
     n = 0; j = 0;
     do
     :: j < NC ->
        if
        :: phase[j] == P_HOLD && now < dl[j] && HAS(KS(j), k) ->
           n++;
           assert(holder[k] == tokc[j] && kexp[k] > now)   /* mutex */
        :: else -> skip
        fi;
        j++
     :: else -> break
     od;
     assert(n <= 1);                              /* mutex */
     k++
  :: else -> break
  od;
  k = 0; n = 0; j = 0
}

/* a set's call returns its lock, valid until dl */
inline set_grant(c, d) {
  d_step {
    k = 0;
    do
    :: k < NK -> assert(holder[k] == tokc[c] && kexp[k] > now); k++   /* all_or_nothing */
    :: else -> break
    od;
    printf("t=%d set %d tok %d returns the set\n", now, c, tokc[c]);
    phase[c] = P_HOLD; dl[c] = d;
    mutex_check()
  }
}

/* s.since(): the earliest basis, in x */
inline since(c) {
  x = basis[Q(0, c)];
  k = 1;
  do
  :: k < NK -> if :: basis[Q(k, c)] < x -> x = basis[Q(k, c)] :: else -> skip fi; k++
  :: else -> break
  od;
  k = 0
}

/* the set's handle withdrawn (leave, deleteIfOwned), the call returns an error */
inline set_fail(c) {
  multi_release(c, true);
  d_step {
    k = 0;
    do
    :: k < NK ->
       assert(holder[k] != tokc[c] && qa[Q(k, c)] == 0);   /* all_or_nothing */
       ann[Q(k, c)] = false; basis[Q(k, c)] = 0;
       k++
    :: else -> break
    od;
    phase[c] = P_DONE; hmask[c] = 0; tmask[c] = 0; arrc[c] = 0; qsince[c] = 0;
    confirm[c] = false; restart[c] = false; wake[c] = false; due[c] = false;
    rwon[c] = false; rlap[c] = false; rarr[c] = 0; rmine[c] = 0; rtaken[c] = 0; st = 0;
    k = 0
  }
}

/* the reply of a set's attempt sent at st: send, then advance/finish or learn */
inline set_reply(c) {
  if
  :: rwon[c] ->
     d_step {
       rwon[c] = false; rmine[c] = 0;
       hmask[c] = ALLK;
       k = 0;
       do
       :: k < NK -> basis[Q(k, c)] = st; k++
       :: else -> break
       od;
       k = 0
     };
     if
     :: now < st + VALID -> set_grant(c, st + VALID); st = 0; goto holding   /* finish */
     :: else -> st = 0; goto failing                                         /* ErrLockLost: deleteIfOwned */
     fi
  :: else ->
     d_step {
       if
       :: rarr[c] != 0 -> arrc[c] = rarr[c]
       :: else -> skip
       fi;
       /* learn */
       confirm[c] = false;
       restart[c] = restart[c] || rlap[c];
       tmask[c] = rtaken[c];
       k = 0;
       do
       :: k < NK ->
          if
          :: HAS(rmine[c], k) -> hmask[c] = hmask[c] | (1 << k); basis[Q(k, c)] = st
          :: !HAS(rmine[c], k) && HAS(hmask[c], k) -> restart[c] = true
          :: else -> skip
          fi;
          k++
       :: else -> break
       od;
       k = 0;
       phase[c] = P_WAIT;
       rlap[c] = false; rarr[c] = 0; rmine[c] = 0; rtaken[c] = 0; st = 0   /* the reply read */
     };
     goto waiting
  fi
}

#ifdef HAZARD_LATE_RESEND
#define RESEND_OK(c) true
#else
/* go-redis's resend lands before the first delivery's entries can lapse */
#define RESEND_OK(c) true
#define RESEND_DUE(c) (rsp[c] && now + 1 >= rst[c] + LIFE)
#endif
bool rsp[NSET];                  /* a resend on its way: the first delivery landed, its reply lost */
byte rst[NSET];

proctype setc(byte c) {
  byte st;
attempt:
  atomic {
    if
    :: restart[c] ->                              /* startOver: leave, then a new token */
       multi_release(c, true);
       d_step {
         k = 0;
         do
         :: k < NK -> ann[Q(k, c)] = false; basis[Q(k, c)] = 0; k++
         :: else -> break
         od;
         k = 0;
         hmask[c] = 0; tmask[c] = 0; arrc[c] = 0; qsince[c] = 0; confirm[c] = false; restart[c] = false
       };
       if
       :: gen[c] + 1 < MAXGEN -> gen[c]++; tokc[c] = TOKEN(c, gen[c])
       :: else -> goto failing                    /* the model's bound: one start over */
       fi
    :: else -> skip
    fi;
    st = now; phase[c] = P_TRY; wake[c] = false; due[c] = false;
    if
    :: qsince[c] == 0 -> qsince[c] = now
    :: else -> skip
    fi;
    multi_obtain(c);
    if
    :: faults > 0 -> faults--; rsp[c] = true; rst[c] = now;  /* reply lost: sent again */
       printf("t=%d set %d: reply lost, go-redis sends it again\n", now, c)
    :: faults > 0 -> faults--; goto failing                  /* reply lost: an error that may have landed */
    :: true -> set_reply(c)
    fi
  }
  atomic { RESEND_OK(c) -> multi_obtain(c); rsp[c] = false; rst[c] = 0; set_reply(c) }
waiting:
  /* plan: try now (confirm, restart, woken, slot ended); handedOver; ctx ends */
  atomic {
    if
    :: confirm[c] || restart[c] || wake[c] || due[c] -> goto attempt
    :: (ann[Q(0, c)] || ann[Q(1, c)]) ->
       d_step {
         /* handedOver: TakeHandoff of each key it waits for */
         k = 0;
         do
         :: k < NK ->
            if
            :: ann[Q(k, c)] && !HAS(hmask[c], k) -> hmask[c] = hmask[c] | (1 << k); basis[Q(k, c)] = qsince[c]
            :: else -> skip
            fi;
            ann[Q(k, c)] = false;
            k++
         :: else -> break
         od;
         k = 0;
         if
         :: hmask[c] != ALLK -> confirm[c] = ((tmask[c] & ~hmask[c] & ALLK) == 0)   /* !waitsForTaken */
         :: else -> skip
         fi
       };
       if
       :: hmask[c] != ALLK -> goto waiting
       :: else ->
          since(c);
          if
          :: 2 * (x + VALID) < TTL + 2 * now -> x = 0; confirm[c] = true; goto attempt
          :: else -> set_grant(c, x + VALID); x = 0; goto holding
          fi
       fi
    :: (wake[c] || due[c] || ann[Q(0, c)] || ann[Q(1, c)]) && faults > 0 ->
       faults--; printf("t=%d set %d: ctx ends\n", now, c); goto failing
    fi
  }
holding:
  atomic {
    multi_release(c, false);
    d_step {
      phase[c] = P_DONE; dl[c] = 0; hmask[c] = 0; tmask[c] = 0; arrc[c] = 0; qsince[c] = 0;
      confirm[c] = false; basis[Q(0, c)] = 0; basis[Q(1, c)] = 0
    };
    goto end
  }
failing:
  atomic { set_fail(c) }
end:
  skip
}

/* a single-key client: lock_obtain.lua, wait, hold, lock_release.lua */
proctype single(byte c) {
  byte st;
attempt:
  atomic {
    st = now; phase[c] = P_TRY; wake[c] = false; due[c] = false;
    if
    :: qsince[c] == 0 -> qsince[c] = now
    :: else -> skip
    fi;
    lock_obtain(c, SKEY(c));
    if
    :: rwon[c] -> rwon[c] = false; phase[c] = P_HOLD; dl[c] = st + VALID; st = 0; d_step { mutex_check() }; goto holding
    :: else -> phase[c] = P_WAIT; st = 0
    fi
  }
waiting:
  atomic {
    if
    :: wake[c] || due[c] -> goto attempt
    :: ann[Q(SKEY(c), c)] ->
       ann[Q(SKEY(c), c)] = false;
       if   /* handedOver: held from its first queued attempt; confirmed when less than half is left */
       :: 2 * (qsince[c] + VALID) < TTL + 2 * now -> goto attempt   /* lock_obtain finds its token */
       :: else -> phase[c] = P_HOLD; dl[c] = qsince[c] + VALID; d_step { mutex_check() }
       fi
    fi
  }
holding:
  atomic { lock_release(c, SKEY(c)); phase[c] = P_DONE; dl[c] = 0; qsince[c] = 0 }
}

#ifdef HAZARD_LATE_RESEND
#define TICK_OK true
#else
#define TICK_OK (!RESEND_DUE(0) && !RESEND_DUE(1))
#endif

/* two sets, both waiting, each holding a key the other waits for with a live entry */
#define HOLDS_AWAITED(a, w) \
  ((holder[0] == tokc[a] && qa[Q(0, w)] > 0 && ql[Q(0, w)] > now) || \
   (holder[1] == tokc[a] && qa[Q(1, w)] > 0 && ql[Q(1, w)] > now))

active proctype tick() {
end_t:
  do
  :: atomic {
       now < TMAX && TICK_OK ->
       d_step {
         mutex_check();
         now++;
         printf("tick: t=%d\n", now);
         ti = 0;
         do
         :: ti < NK ->
            if
            :: holder[ti] != 0 && kexp[ti] <= now -> holder[ti] = 0; kexp[ti] = 0   /* the key expires */
            :: else -> skip
            fi;
            if
            :: qexp[ti] != 0 && qexp[ti] <= now ->                                /* the queue key expires */
               hrec[ti] = 0; qexp[ti] = 0;
               j = 0;
               do
               :: j < NC -> qa[Q(ti, j)] = 0; ql[Q(ti, j)] = 0; j++
               :: else -> break
               od;
               j = 0
            :: else -> skip
            fi;
            ti++
         :: else -> break
         od;
         ti = 0;
         do
         :: ti < NC ->
            if
            :: phase[ti] == P_WAIT -> due[ti] = true   /* the retry slot ends */
            :: else -> skip
            fi;
            ti++
         :: else -> break
         od;
         ti = 0
       }
     }
  :: timeout ->
     d_step {
       deadlock = (phase[0] == P_WAIT && phase[1] == P_WAIT && HOLDS_AWAITED(0, 1) && HOLDS_AWAITED(1, 0));
       assert(!deadlock);                         /* no_deadlock */
       deadlock = false
     }
  od
}

init {
  atomic {
    k = 0;
    do
    :: k < NC ->
       tokc[k] = TOKEN(k, 0);
       if
       :: k < NSET -> run setc(k)
       :: else -> run single(k)
       fi;
       k++
    :: else -> break
    od;
    k = 0
  }
}
