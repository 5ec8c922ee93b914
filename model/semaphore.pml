/* mirrors: scripts/permit_acquire.lua 4939629f706a340979bdd9cc90e8e49b52d5ad6b */
/* mirrors: scripts/permit_release.lua c9f63d757b7c360165afe6eff797df8d9ac306b3 */
/* mirrors: scripts/permit_confirm.lua 0754a8d17e30993bb1871e0e5c3200eb0438920c */
/* mirrors: scripts/hold_refresh.lua 0e9d500a17874f9a01302babfcea27df7f694123 */
/* mirrors: scripts/lib_queue.lua aaaff9dc8b3b288069c097f9c47e8f84e5dcc5d6 */
/* mirrors: scripts/lib_fence.lua c1e355d42a7bc2fa209c21e45bac76f4deb77325 */
/* mirrors: scripts/lib_hold.lua dcc83461b5fbcf9e71ce362340c0b5718a1d743d */
/* check: safety -DFAULTS=2 */
/* check: safety -DFAULTS=2 -DNPERM=2 */
/* bug: BUG_PERMIT_NO_DROP_LAPSED safety -DFAULTS=2 */
/* bug: BUG_PERMIT_PEERS_NOT_ASKED safety */
/* bug: BUG_PEERS_ENTRY_TTL safety */

/*
 * A semaphore of NPERM permits on one key, with handoff (see NOTES-b.md).
 *
 * Clients 0 and 1 wait in one Locker (A); client 2 (and 3, with
 * NCLIENTS=4) are each their own Locker. Each client makes one
 * acquisition: it tries (queued: its first attempt leaves an entry in the
 * handoff queue), joins its Locker's FIFO, and then, as acquire.go's wait
 * does, takes a heard handoff (confirming it when less than half its TTL
 * is left), tries when woken by an empty announcement, when told it was
 * handed a permit unheard (heldByLocked), when it is a new head not
 * queued in Redis, and at the end of each retry slot when it is its
 * Locker's head. A holder renews (hold_refresh.lua), releases
 * (permit_release.lua, which hands the permit to the first live queue
 * entry) or crashes (client 2 only).
 *
 * Time: the tick process advances the clock only when no other step can
 * be taken (timeout): every step of a client or of Redis takes no time,
 * unless a fault says otherwise (a pause: a client's request waits for the
 * next tick; a late announcement). All times are kept as ticks left, so
 * the state is finite. A client's validity deadline runs from before its
 * request, TTL - DRIFT.
 *
 * Properties (assertions, checked at every tick):
 *  - sem_bound: at most NPERM clients hold a permit before their deadline,
 *    and each of them holds it in Redis, with the fence Redis gave it last
 *    (fences increase: each grant takes the next one);
 *  - handed_taken: a permit handed to a waiter that was alive and
 *    waiting when it was handed, or to a lapsed entry, is taken (won,
 *    confirmed or given back) before its TTL runs out, unless the waiter
 *    crashed, gave up or was paused meanwhile.
 */

#ifndef NCLIENTS
#define NCLIENTS 3
#endif
#ifndef NPERM
#define NPERM 1
#endif
#define TTL 3
#define DRIFT 1
#define LIFE 2      /* a queue entry lapses LIFE ticks after it was last renewed */
#define SLOT 1      /* the retry strategy's delay */
#define NLOCKERS (NCLIENTS - 1)

#define LOCKER(i) ((i) < 2 -> 0 : (i) - 1)

/* faults: one budget for the whole run, shared by every kind */
#ifndef FAULTS
#define FAULTS 1
#endif
byte faults = FAULTS;
#define lose faults     /* a lost announcement, or a lost withdraw */
#define late faults     /* a late announcement */
#define pauses faults   /* a request that waits for the next tick */
#define resend faults   /* an acquire delivered twice */
#define giveup faults   /* a waiter whose strategy gives up */
#define crash faults    /* client 2 crashes while it holds */

/* Redis: the semaphore, the fence counter, the handoff queue */
byte exp[NCLIENTS];     /* ticks left of each client's permit, 0: none */
byte fctr;              /* the fence counter */
byte pf[NCLIENTS];      /* the fence of the permit each client was given last */
byte rq[NCLIENTS];      /* the handoff queue, in arrival order */
byte rqn;
byte lapse[NCLIENTS];   /* ticks until each entry lapses, 0: lapsed */
bool inq[NCLIENTS];

/* pub/sub: one pending handoff announcement per addressee */
byte ann[NCLIENTS];     /* 0: none, 1: deliverable, 2: late (after the next tick) */
byte annf[NCLIENTS];    /* its fence */

/* the Lockers: each a FIFO of waiters */
byte lq[NLOCKERS * 2];
byte lqn[NLOCKERS];

/* each client's state, as its Locker sees it */
bool waiting[NCLIENTS];  /* in its Locker's queue */
bool queued[NCLIENTS];   /* its attempts carry an entry (it sent one) */
byte until[NCLIENTS];    /* ticks until its entry lapses, as its Locker reckons */
byte since[NCLIENTS];    /* ticks since its first queued attempt (capped) */
bool heard[NCLIENTS];    /* a handoff heard (handedOver) */
byte heardf[NCLIENTS];
bool missed[NCLIENTS];
bool woken[NCLIENTS];
byte slot[NCLIENTS];     /* ticks until the end of its retry slot */
bool paused[NCLIENTS];
bool rest[NCLIENTS];     /* it lets this tick pass without a step of its own choosing */

/* each client's hold */
bool holding[NCLIENTS];
byte dl[NCLIENTS];       /* ticks until its deadline */
byte myf[NCLIENTS];
byte pdl[NCLIENTS];      /* the deadline of the request in flight */
bool alive[NCLIENTS];
bool untaken[NCLIENTS];  /* handed over, not yet taken */

#define HEAD(i) (lqn[LOCKER(i)] > 0 && lq[LOCKER(i) * 2] == (i))

inline ljoin(i) {
  lq[LOCKER(i) * 2 + lqn[LOCKER(i)]] = i;
  lqn[LOCKER(i)]++;
  waiting[i] = true
}

inline lremove(i) {
  if
  :: waiting[i] ->
     if
     :: lq[LOCKER(i) * 2] == i -> lq[LOCKER(i) * 2] = lq[LOCKER(i) * 2 + 1]
     :: else -> skip
     fi;
     lq[LOCKER(i) * 2 + 1] = 0;
     lqn[LOCKER(i)]--;
     waiting[i] = false
  :: else -> skip
  fi
}

/* the Redis queue */
inline rqremove(i) {
  if
  :: inq[i] ->
     k = 0;
     do
     :: k < rqn && rq[k] != i -> k++
     :: else -> break
     od;
     do
     :: k + 1 < rqn -> rq[k] = rq[k + 1]; k++
     :: else -> break
     od;
     rqn--; rq[rqn] = 0;
     inq[i] = false; lapse[i] = 0
  :: else -> skip
  fi
}

/* heldByLocked: a waiter of i's Locker that holds a permit was handed it unheard */
inline heldby(j) {
  if
  :: waiting[j] -> missed[j] = true
  :: else -> skip
  fi
}

/* an empty announcement: the head of every Locker tries */
inline kickall() {
  k = 0;
  do
  :: k < NLOCKERS ->
     if
     :: lqn[k] > 0 -> woken[lq[k * 2]] = true
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

/* pop_entry, and the handoff of permit_release.lua */
inline handoff() {
  /* drop the lapsed entries */
#ifndef BUG_PERMIT_NO_DROP_LAPSED
  k = 0;
  do
  :: k < rqn && lapse[rq[k]] == 0 -> j = rq[k]; rqremove(j); k = 0
  :: k < rqn && lapse[rq[k]] > 0 -> k++
  :: else -> break
  od;
#endif
  if
  :: rqn > 0 ->
     j = rq[0];
     untaken[j] = (alive[j] && waiting[j]) || lapse[j] == 0;
     rqremove(j);
     exp[j] = TTL;
     fctr++; pf[j] = fctr;
     if
     :: ann[j] == 0 -> ann[j] = 1; annf[j] = fctr
     :: else -> skip   /* an earlier one is pending: it is heard first */
     fi
  :: else -> kickall()
  fi
}

/* permit_release.lua (the holder's, and the withdraw of a waiter's entry) */
inline release(i, withdraw) {
  if
  :: withdraw -> rqremove(i)
  :: else -> skip
  fi;
  if
  :: exp[i] > 0 -> exp[i] = 0; untaken[i] = false; handoff()
  :: else -> skip
  fi
}

/* permit_acquire.lua, for client i with the peers in peers (a bit mask) */
inline acquire(i, peers) {
  live = 0; k = 0;
  do
  :: k < NCLIENTS -> live = live + (exp[k] > 0 -> 1 : 0); k++
  :: else -> break
  od;
  if
  :: exp[i] == 0 && live >= NPERM ->
     if
     :: !inq[i] -> rq[rqn] = i; rqn++; inq[i] = true
     :: else -> skip
     fi;
     lapse[i] = LIFE;
     rok = false; rpeers = 0;
#ifndef BUG_PERMIT_PEERS_NOT_ASKED
     k = 0;
     do
     :: k < NCLIENTS ->
        if
        :: (peers & (1 << k)) && exp[k] > 0 -> rpeers = rpeers | (1 << k)
        :: else -> skip
        fi;
        k++
     :: else -> break
     od;
#endif
     skip
  :: else ->
     rmine = (exp[i] > 0);
     exp[i] = TTL;
     rqremove(i);
     fctr++; pf[i] = fctr; rfence = fctr;
     rfree = NPERM - live - (rmine -> 0 : 1);
     rok = true
  fi
}

/*
 * PeersQueued (internal/notify/turns.go): every other waiter of the
 * Locker that queued an entry and has not heard a handoff, won or left.
 * BUG_PEERS_ENTRY_TTL is the library before commit 0fbce2d, which named a
 * peer only while its entry was live as its Locker reckoned
 * (now.Before(o.entryUntil)): a permit handed just before the entry lapsed
 * sat idle for almost its TTL (found by this model).
 */
#ifdef BUG_PEERS_ENTRY_TTL
#define NAMED(k) (until[k] > 0)
#else
#define NAMED(k) true
#endif
inline peersof(i, peers) {
  peers = 0; k = 0;
  do
  :: k < NCLIENTS ->
     if
     :: k != i && LOCKER(k) == LOCKER(i) && waiting[k] && queued[k] && !heard[k] && NAMED(k) ->
        peers = peers | (1 << k)
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

/*
 * a pause: the request waits for the next tick. A permit handed to a
 * waiter that is paused afterwards is excused from handed_taken: no
 * protocol lets a stopped process take what it was handed in time
 * (with FAULTS=3, a lost announcement and a pause of the waiter's
 * missed attempt let the permit lapse).
 */
inline maypause(i) {
  atomic {
    if
    :: pauses > 0 -> pauses--; paused[i] = true; untaken[i] = false
    :: true
    fi
  };
  (!paused[i])
}

/* scratch of the atomic steps, not part of the state */
hidden byte k, j, live, rmine, hok, hpe, hf, hfr;

proctype client(byte i) {
  byte peers, rpeers, rfence, rfree;
  bool first, rok;

  /* Ticket: a Locker with waiters already lets a new call join behind them */
  atomic {
    if
    :: lqn[LOCKER(i)] > 0 -> ljoin(i); slot[i] = SLOT; goto wait
    :: else -> first = true
    fi
  }
try:
  /* an attempt: Sending, then permit_acquire.lua, then the reply */
  atomic {
    if
    :: !queued[i] -> queued[i] = true; since[i] = 0
    :: else -> skip
    fi;
    peersof(i, peers);
    pdl[i] = TTL - DRIFT;
    woken[i] = false; missed[i] = false
  }
  maypause(i);
  atomic {
    acquire(i, peers);
    if
    :: resend > 0 -> resend--; acquire(i, peers)
    :: true
    fi;
    peers = 0
  }
  /* the reply: another client's attempt may be answered first */
  atomic {
    hok = rok; hpe = rpeers; hf = rfence; hfr = rfree;
    rok = false; rpeers = 0; rfence = 0; rfree = 0;
    if
    :: hok && pdl[i] > 0 ->
       untaken[i] = false;
       lremove(i);
       if
       :: hfr > 0 && lqn[LOCKER(i)] > 0 -> woken[lq[LOCKER(i) * 2]] = true
       :: else -> skip
       fi;
       holding[i] = true; dl[i] = pdl[i]; myf[i] = hf;
       goto hold
    :: hok -> untaken[i] = false; lremove(i); release(i, true); goto done
    :: else ->
       if
       :: first -> first = false; ljoin(i); slot[i] = SLOT
       :: else -> skip
       fi;
#ifdef BUG_PEERS_ENTRY_TTL
       until[i] = LIFE;         /* the entry's life as its Locker reckoned it */
#endif
       k = 0;
       do
       :: k < NCLIENTS ->
          if
          :: hpe & (1 << k) -> heldby(k)
          :: else -> skip
          fi;
          k++
       :: else -> break
       od
    fi
  }
wait:
  atomic {
    if
    :: heard[i] -> goto handed
    :: !heard[i] && (woken[i] || missed[i] || (HEAD(i) && !queued[i]) || (HEAD(i) && slot[i] == 0)) ->
       slot[i] = SLOT; goto try
    :: !heard[i] && !HEAD(i) && slot[i] == 0 -> slot[i] = SLOT; goto wait
    :: giveup > 0 && !heard[i] && !rest[i] -> giveup--; goto leave
    :: !heard[i] && !rest[i] -> rest[i] = true; goto wait
    fi
  }
handed:
  /* TakeHandoff, handedOver: confirm when less than half the TTL is left */
  atomic {
    lremove(i);
    untaken[i] = false;
    if
    :: 2 * (TTL - DRIFT - since[i]) >= TTL ->
       holding[i] = true; dl[i] = TTL - DRIFT - since[i]; myf[i] = heardf[i];
       goto hold
    :: else -> pdl[i] = TTL - DRIFT
    fi
  }
  maypause(i);
  atomic {
    /* permit_confirm.lua */
    if
    :: exp[i] > 0 -> exp[i] = TTL; fctr++; pf[i] = fctr; hf = fctr; hok = true
    :: else -> hok = false
    fi;
    if
    :: hok && pdl[i] > 0 -> holding[i] = true; dl[i] = pdl[i]; myf[i] = hf; goto hold
    :: else -> release(i, true); goto done   /* ErrLockLost */
    fi
  }
leave:
  atomic {
    lremove(i);
    if
    :: lose > 0 -> lose--    /* the withdraw is lost: the entry lapses */
    :: true -> release(i, true)
    fi;
    untaken[i] = false;
    goto done
  }
hold:
  do
  :: atomic { dl[i] <= 1 && dl[i] > 0 -> pdl[i] = TTL - DRIFT }
     maypause(i);
     atomic {
       /* hold_refresh.lua */
       if
       :: exp[i] > 0 -> exp[i] = TTL; dl[i] = pdl[i]
       :: else -> holding[i] = false; goto done
       fi
     }
  :: atomic { dl[i] == 0 -> holding[i] = false; release(i, false); goto done }
  :: atomic { !rest[i] && dl[i] > 0 -> holding[i] = false; release(i, false); goto done }
  :: atomic { i == 2 && crash > 0 && !rest[i] && dl[i] > 0 -> crash--; holding[i] = false; alive[i] = false; goto done }
  :: atomic { !rest[i] && dl[i] > 1 -> rest[i] = true }
  od;
done:
  atomic { rest[i] = false; waiting[i] = false; queued[i] = false; heard[i] = false; missed[i] = false;
           woken[i] = false; slot[i] = 0; until[i] = 0; since[i] = 0; pdl[i] = 0; dl[i] = 0; myf[i] = 0 }
}

/* the Lockers' dispatchers: a handoff announcement heard, lost, or late */
#define PENDING (ann[0] == 1 || ann[1] == 1 || ann[2] == 1 || ann[NCLIENTS - 1] == 1)
inline firstpending() {
  j = 0;
  do
  :: j < NCLIENTS && ann[j] != 1 -> j++
  :: else -> break
  od
}

active proctype dispatch() {
end_d:
  do
  :: atomic { PENDING -> firstpending();
       if
       :: waiting[j] && !heard[j] -> heard[j] = true; heardf[j] = annf[j]
       :: else -> skip   /* not waiting (yet, or any more): missed */
       fi;
       ann[j] = 0; j = 0 }
  :: atomic { PENDING && lose > 0 -> lose--; firstpending(); ann[j] = 0; j = 0 }
  :: atomic { PENDING && late > 0 -> late--; firstpending(); ann[j] = 2; j = 0 }
  od
}

inline dec(x) {
  if
  :: x > 0 -> x--
  :: else -> skip
  fi
}

hidden byte ti, tn;
active proctype tick() {
end_t:
  do
  :: timeout ->
     atomic {
       ti = 0; tn = 0;
       do
       :: ti < NCLIENTS ->
          dec(exp[ti]); dec(lapse[ti]); 
#ifdef BUG_PEERS_ENTRY_TTL
          dec(until[ti]);
#endif
          dec(dl[ti]); dec(pdl[ti]); dec(slot[ti]);
          if :: queued[ti] && since[ti] < TTL -> since[ti]++ :: else -> skip fi;
          if :: ann[ti] == 2 -> ann[ti] = 1 :: else -> skip fi;
          paused[ti] = false; rest[ti] = false;
          /* handed_taken */
          assert(!(untaken[ti] && exp[ti] == 0 && alive[ti]));
          if :: exp[ti] == 0 -> untaken[ti] = false :: else -> skip fi;
          /* sem_bound, and the fence of each holder */
          if
          :: holding[ti] && dl[ti] > 0 ->
             tn++;
             assert(exp[ti] > 0 && myf[ti] == pf[ti])
          :: else -> skip
          fi;
          ti++
       :: else -> break
       od;
       assert(tn <= NPERM);
       ti = 0; tn = 0
     }
  od
}

init {
  atomic {
    k = 0;
    do
    :: k < NCLIENTS -> alive[k] = true; run client(k); k++
    :: else -> break
    od;
    k = 0
  }
}
