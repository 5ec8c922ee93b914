/* mirrors: scripts/lock_obtain.lua 6f3d9912181d1c895a8ea1e4c496d306fa740e95 */
/* mirrors: scripts/lock_release.lua 6b661eb34dd743f16c7cdc6e4d5e2e286b2c55e4 */
/* mirrors: scripts/lock_confirm.lua e0f9796e6fa2fc1486f92bc728212b2fe01c2169 */
/* mirrors: scripts/lock_refresh.lua 97de6635709500b52a125c2451b198118328d4bb */
/* mirrors: scripts/lib_queue.lua aaaff9dc8b3b288069c097f9c47e8f84e5dcc5d6 */
/* mirrors: scripts/lib_fence.lua c1e355d42a7bc2fa209c21e45bac76f4deb77325 */
/* check: safety */
/* check: safety -DTRYONCE */
/* bug: BUG_WAKE_USED_BY_INFLIGHT safety -DTRYONCE */
/* bug: BUG_LATE_HANDOFF_NO_CONFIRM safety */
/* bug: BUG_RELEASE_NO_ANNOUNCE safety */
/* bug: BUG_CONFIRM_WRITE_FIRST safety */
/* bug: BUG_NO_DROP_LAPSED safety */
/* bug: BUG_TRY_NOT_RESEND_SAFE safety -DTRYONCE */
/* bug: BUG_NO_DRIFT safety */
/* bug: BUG_OBTAIN_NOT_RESEND_SAFE safety */
/* bug: BUG_QUEUE_RENEW_NO_NX safety */
/* check: safety -DFAULTS=2 -DREFUSAL_LIFTS -DONLY_REFUSE_RESEND */
/* bug: BUG_ZREM_BEFORE_FENCE safety -DFAULTS=2 -DREFUSAL_LIFTS -DONLY_REFUSE_RESEND */
/* by hand (found too; left out of check.sh's runs for time, see NOTES-lock.md):
     BUG_NO_DRIFT safety, BUG_OBTAIN_NOT_RESEND_SAFE safety, BUG_QUEUE_RENEW_NO_NX safety */
/*
 * One lock key with its handoff queue, fence counter, validity deadlines
 * and lease (see NOTES-lock.md; time scheme of NOTES-b.md).
 *
 * Clients 0 and 1 wait in one Locker (A), client 2 in another (B, its own
 * process: only it crashes). Each makes one fenced, waiting acquisition
 * (Obtain with WithFencing and a retry strategy): the Ticket (a Locker
 * with waiters already joins the new call behind them without an
 * attempt), a first attempt (lock_obtain.lua with the queue: a refused
 * one queues the caller), Join (subscribing the Locker's channel on its
 * first waiter), then acquire.go's wait loop: TakeHandoff (a heard
 * handoff; handedOver confirms it with lock_confirm.lua when less than
 * half its TTL is left), Plan (woken by a plain release, told it missed a
 * handoff, a new head not queued in Redis, the head at the end of each
 * retry slot), a slot that passes behind the head, and giving up
 * (Leave, and the withdraw: lock_release.lua with the caller's entry). A
 * holder writes once to a fenced resource, renews (the lease:
 * lock_refresh.lua), loses the lock at its deadline (the watchdog) and
 * releases (lock_release.lua: hands over to the first live entry and
 * announces, or deletes and announces an empty message).
 *
 * Faults, from one budget FAULTS: a pause (a request waits for one or
 * more ticks: it lands against a moved-on state), a resend (a script runs
 * twice; the second delivery comes a tick or more later), a lost or a late
 * announcement, a lost withdraw, a refused script (before its first
 * write; or lock_obtain's ZREM after its SET), a waiter that gives up
 * (ctx), client 2 crashing (waiting, with a reply in flight, holding),
 * a holder's clock lagging one tick (the drift allowance).
 *
 * Properties (assertions; labels in the comments):
 *  - mutex (tick): at most one client holds before its deadline, and it
 *    holds in Redis, unexpired, with the fence counter's value;
 *  - fence_grant (grant): each grant's fence is higher than every
 *    earlier grant's;
 *  - fence_order (resource): the resource accepts a write only when its
 *    fence is higher than the last accepted; an accepted write never
 *    comes from an earlier grant than the last accepted write's;
 *  - fifo (release): a handoff goes to the live entry queued first;
 *  - handed_taken (tick): a lock handed to a waiting client's entry, or
 *    to a lapsed entry, is taken (or given back) before the next tick
 *    when no fault happened, within KF ticks per fault so far otherwise
 *    (no lost wake-up);
 *  - free_taken (tick): a free lock while a client waits is taken within
 *    the same bound (the head after a plain release);
 *    (both: a tick at which some request is paused excuses what is pending)
 *  - not_lost_to_self (reply): an attempt is never told that the lock is
 *    held by its own token (a resend whose first delivery took it);
 *  - refused_clean (confirm): a script refused by Redis wrote nothing.
 *
 * -DTRYONCE: client 1 makes an unfenced try-once call instead
 * (NoRetry: acquireOnce's SET NX PX, then GET when taken), and its release, without the fence
 * key, drops the fenced entries (lib_queue.lua 34). Before the fix of
 * internal/notify found here (BUG_WAKE_USED_BY_INFLIGHT), free_taken
 * failed there: the announcement of that plain release, heard while the
 * head's attempt sent before it was on its way, was used up by that
 * attempt's failure (triedLocked clears q.woken), and the head waited for
 * its retry slot. Now kickLocked sets q.pending for a head mid-attempt.
 *
 * -DREFUSAL_LIFTS: a resend of a call whose ZREM was refused succeeds (the
 * rights came back between the deliveries). With FAULTS=2 it found
 * fence_grant failing (see NOTES-lock.md, Findings): won() dropped the
 * entry before it took the fence, so the resend, finding the caller's
 * token, answered the last holder's fence. Fixed in lock_obtain.lua
 * (won takes the fence first; TestRefusedMidwayLeavesNothing, "resent
 * after a refused ZREM"); BUG_ZREM_BEFORE_FENCE is the script before.
 */

#define NC 3
#define NL 2
#define TTL 3
#ifdef BUG_NO_DRIFT
#define DRIFT 0
#else
#define DRIFT 1
#endif
#define VALID (TTL - DRIFT)
#define LIFE 2          /* a queue entry lapses LIFE ticks after it was last written */
#define SLOT 1          /* the retry strategy's delay */
#ifndef KF
#define KF 1
#endif
#ifndef FAULTS
#define FAULTS 1
#endif

#define LOCKER(i) ((i) < 2 -> 0 : 1)
#ifdef TRYONCE
#define FENCED(i) ((i) != 1)   /* client 1 makes an unfenced try-once call (acquireOnce) */
#else
#define FENCED(i) true
#endif
#define HEAD(i) (lqn[LOCKER(i)] > 0 && lq[LOCKER(i) * 2] == (i))
/* Plan says try now: woken, missed, a new head not queued, the head at its slot's end */
#define TRYNOW(i) (wk[LOCKER(i)] == (i) + 1 || missed[i] || (HEAD(i) && !queued[i]) || (HEAD(i) && slot[i] == 0))

/* reply codes */
#define R_LOST 0
#define R_OK 1
#define R_ERR 2

byte faults = FAULTS;
#define resend faults
#define refuse faults
#ifdef ONLY_REFUSE_RESEND
/* only refusals and resends draw on the budget (the run of REFUSAL_LIFTS
   with two faults, which with every kind takes 38.6M states and 96s) */
byte nf = 0;
#define pauses nf
#define lose nf
#define late nf
#define giveup nf
#define crash nf
#define lag nf
#else
#define pauses faults
#define lose faults
#define late faults
#define giveup faults
#define crash faults
#define lag faults
#endif
#define K ((FAULTS - faults) * KF)   /* each fault so far may cost a retry slot */

/* Redis: the lock key, the fence counter, the handoff queue */
byte holder;            /* 0: absent; i + 1: client i's token */
byte lexp;              /* ticks left of the lock key */
byte fctr;              /* the fence counter, 0: absent (kept for ever once taken: no WithFenceTTL) */
byte rq[NC];            /* the queue's entries, in order of their 'a:' scores */
byte rqn;
byte lapse[NC];         /* ticks until each entry's 'l:' score lapses */
bool inq[NC];
bool before[NC * NC];   /* ghost: before[a * NC + b]: a's entry was queued before b's */

/* pub/sub: a handoff announcement to each client's Locker, a plain one to each Locker */
byte ann[NC];           /* 0: none, 1: deliverable, 2: late */
byte annf[NC];
byte annp[NL];
byte sub[NL];           /* 0: no key queue, 1: SUBSCRIBE sent, 2: confirmed */

/* the Lockers */
byte lq[NL * 2];
byte lqn[NL];
byte wk[NL];            /* q.woken + 1 */
bool pend[NL];          /* q.pending */
bool kept[NC];          /* q.handedTo: a handoff to the client heard before it joined */
byte keptf[NC];

/* each client */
bool inacq[NC];         /* in its acquisition (from the Ticket until it holds or returns) */
bool waiting[NC];       /* in its Locker's queue */
bool queued[NC];        /* w.queued */
byte since[NC];         /* ticks since its first queued attempt, capped at 1 */
bool heard[NC];         /* w.handedOver */
byte heardf[NC];
bool missed[NC];
bool existed[NC];       /* Ticket.Existed */
bool evseen[NC];        /* an event between its Ticket and its Join */
byte slot[NC];
bool paused[NC];
bool rest[NC];
bool alive[NC];
bool holding[NC];
byte dl[NC];            /* ticks until its deadline */
byte pdl[NC];           /* the deadline of the request in flight */
byte myf[NC];
bool lagged[NC];
bool zrref[NC];         /* its lock_obtain's ZREM was refused after the SET */
#ifndef BUG_WAKE_USED_BY_INFLIGHT
bool infl[NC];          /* w.trying: an attempt on its way (from Sending to its reply) */
#endif

/* the properties' ghosts */
byte untaken[NC];       /* 1: handed to a waiting client's live entry, 2: to a lapsed entry */
byte age[NC];
byte freeage;
byte gmax;              /* the highest fence granted */
byte gseq;              /* grants so far */
bool wlate[NC];         /* a write in flight, late */
byte wf[NC];
byte wg[NC];
byte rlast;             /* the resource: the last fence it accepted */
byte rlastg;

hidden byte k, j, x, L, lf, sx, ti, tn;

inline dec(x) {
  if
  :: x > 0 -> x--
  :: else -> skip
  fi
}

/* kickLocked */
inline kick(l) {
  if
  :: lqn[l] == 0 -> skip
  :: lqn[l] > 0 && wk[l] != 0 -> pend[l] = true
#ifdef BUG_WAKE_USED_BY_INFLIGHT
  :: lqn[l] > 0 && wk[l] == 0 -> wk[l] = lq[l * 2] + 1   /* before the fix */
#else
  /* a head whose attempt (w.trying), sent before this announcement, is on
     its way tries once more if it fails (q.pending) */
  :: lqn[l] > 0 && wk[l] == 0 && !infl[lq[l * 2]] -> wk[l] = lq[l * 2] + 1
  :: lqn[l] > 0 && wk[l] == 0 && infl[lq[l * 2]] -> wk[l] = lq[l * 2] + 1; pend[l] = true
#endif
  fi
}

/* q.events++: for a waiter between its Ticket and its Join */
inline events(l) {
  d_step { eventsb(l) }
}

inline eventsb(l) {
  k = 0;
  do
  :: k < NC ->
     if
     :: LOCKER(k) == l && inacq[k] && !waiting[k] -> evseen[k] = true
     :: else -> skip
     fi;
     k++
  :: else -> break
  od;
  k = 0
}

/* removeLocked (Leave): a woken waiter that leaves passes the wake on */
inline lremove(i) {
  d_step { lrem(i) }
}

inline lrem(i) {
  if
  :: waiting[i] ->
     L = LOCKER(i);
     if
     :: lq[L * 2] == i -> lq[L * 2] = lq[L * 2 + 1]
     :: else -> skip
     fi;
     lq[L * 2 + 1] = 0;
     lqn[L]--;
     waiting[i] = false;
     if
     :: lqn[L] == 0 -> wk[L] = 0; pend[L] = false
     :: lqn[L] > 0 && wk[L] == i + 1 -> wk[L] = 0; kick(L)
     :: else -> skip
     fi;
     L = 0
  :: else -> skip
  fi
}

/* Won: triedLocked(won) clears woken and pending, then removeLocked */
inline won(i) {
  d_step { wonb(i) }
}

inline wonb(i) {
  if
  :: wk[LOCKER(i)] == i + 1 -> wk[LOCKER(i)] = 0; pend[LOCKER(i)] = false
  :: else -> skip
  fi;
  lrem(i)
}

/* heldByLocked: the holder, if a waiter of i's Locker, missed its handoff */
inline heldby(i, h) {
  if
  :: h > 0 && waiting[h - 1] && LOCKER(h - 1) == LOCKER(i) -> missed[h - 1] = true
  :: else -> skip
  fi
}

/* Lost: triedLocked(lost), heldByLocked */
inline lost(i, h) {
  d_step { lostb(i, h) }
}

inline lostb(i, h) {
  if
  :: wk[LOCKER(i)] == i + 1 ->
     wk[LOCKER(i)] = 0;
     if
     :: pend[LOCKER(i)] -> pend[LOCKER(i)] = false; kick(LOCKER(i))
     :: else -> skip
     fi
  :: else -> skip
  fi;
  heldby(i, h)
}

/* Join (after a queued attempt when sent, else without one) */
inline join(i, sent, h) {
  d_step { joinb(i, sent, h) }
}

inline joinb(i, sent, h) {
  L = LOCKER(i);
  sx = (sub[L] == 0);       /* created */
  if
  :: sx -> sub[L] = 1       /* SUBSCRIBE; its confirmation wakes the head */
  :: else -> skip
  fi;
  heldby(i, h);
  if
  :: sent && kept[i] -> heard[i] = true; heardf[i] = keptf[i]
  :: else -> skip
  fi;
  lq[L * 2 + lqn[L]] = i;
  lqn[L]++;
  waiting[i] = true;
  if
  :: !sx && sub[L] == 2 && (!existed[i] || evseen[i]) -> kick(L)
  :: else -> skip
  fi;
  existed[i] = false; evseen[i] = false;
  L = 0; sx = 0
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
     inq[i] = false; lapse[i] = 0;
     k = 0;
     do
     :: k < NC -> before[i * NC + k] = false; before[k * NC + i] = false; k++
     :: else -> break
     od;
     k = 0
  :: else -> skip
  fi
}

/* lock_obtain.lua 85-87: ZADD NX 'a:' (keeps the place), ZADD 'l:', PEXPIRE queue */
inline rqadd(i) {
  if
  :: !inq[i] ->
     k = 0;
     do
     :: k < rqn -> before[rq[k] * NC + i] = true; k++
     :: else -> break
     od;
     rq[rqn] = i; rqn++; inq[i] = true
  :: else ->
#ifdef BUG_QUEUE_RENEW_NO_NX
     /* ZADD without NX: a renewal scores the entry anew, at the back */
     k = 0;
     do
     :: k < rqn && rq[k] != i -> k++
     :: else -> break
     od;
     do
     :: k + 1 < rqn -> rq[k] = rq[k + 1]; k++
     :: else -> break
     od;
     rq[rqn - 1] = i;
#endif
     skip
  fi;
  lapse[i] = LIFE;
  k = 0
}

/* announce a handoff to j (lock_release.lua 66): heard by j's Locker if subscribed */
inline announce_to(j) {
#ifndef BUG_RELEASE_NO_ANNOUNCE
  if
  :: sub[LOCKER(j)] == 2 && ann[j] == 0 -> ann[j] = 1; annf[j] = fctr
  :: else -> skip   /* not subscribed; or an earlier one is pending: it is heard first */
  fi
#else
  skip
#endif
}

/* announce('') (lock_release.lua 71): to every subscribed Locker */
inline announce_plain() {
  if
  :: sub[0] == 2 && annp[0] == 0 -> annp[0] = 1
  :: else -> skip
  fi;
  if
  :: sub[1] == 2 && annp[1] == 0 -> annp[1] = 1
  :: else -> skip
  fi
}

/*
 * lock_obtain.lua, with the queue and the fence counter (a queued,
 * fenced attempt), for client i; the reply in rres, rf, rh.
 */
inline obtain(i) {
  if
  :: refuse > 0 ->
     /* 38-43 TIME, GET fence, or the first write (66 SET under OOM, 85 ZADD)
        refused: nothing written */
     refuse--; rres = R_ERR
  :: true ->
     lf = fctr;                                   /* 42 GET fence */
     if
     :: holder == 0 ->                            /* 66 SET NX PX */
        holder = i + 1; lexp = TTL;
#ifdef BUG_ZREM_BEFORE_FENCE
        /* the script before the fix: won() dropped the entry, then took
           the fence, so a refused ZREM left no fence taken */
        if
        :: refuse > 0 ->                          /* ZREM refused after the SET */
           refuse--; zrref[i] = true; rres = R_ERR
        :: true ->
           d_step { rqremove(i) }                 /* won(true): ZREM the entry */
           fctr++; rf = fctr; rres = R_OK         /* take_fence */
        fi
#else
        fctr++; rf = fctr;                        /* 52-58 won(true): take_fence first */
        if
        :: refuse > 0 ->                          /* 61 then ZREM, refused after the SET */
           refuse--; zrref[i] = true; rres = R_ERR
        :: true ->
           d_step { rqremove(i) };                /* ZREM the entry */
           rres = R_OK
        fi
#endif
#ifndef BUG_OBTAIN_NOT_RESEND_SAFE
#ifndef REFUSAL_LIFTS
     :: holder == i + 1 && zrref[i] ->            /* a resend of the call whose ZREM was
                                                     refused: refused again (same rights) */
        lexp = TTL; rres = R_ERR
     :: holder == i + 1 && !zrref[i] ->           /* 69-77: ours already */
#else
     :: holder == i + 1 ->
#endif
        lexp = TTL;                               /* 71 PEXPIRE */
        d_step { rqremove(i) }                    /* 75/77 won(false) */
        if
        :: lf > 0 -> rf = lf                      /* 53-55 the fence still ours */
        :: else -> fctr++; rf = fctr              /* 57 no counter: take_fence */
        fi;
        rres = R_OK
     :: holder != 0 && holder != i + 1 ->
#else
     :: holder != 0 ->
#endif
        d_step { rqadd(i) }                       /* 84-88 */
        rh = holder; rres = R_LOST                /* 88 {-2 - pttl, holder} */
     fi
  fi;
  lf = 0
}

/* lib_queue.lua pop_entry and lock_release.lua 57-71: the lock is the caller's */
inline handoff() {
  d_step { handoffb() }
}

inline handoffb() {
#ifdef TRYONCE
  /* an unfenced release (no KEYS[3]): pop_entry drops the entries that ask
     for a fence (lib_queue.lua 34), every entry here */
  if
  :: !FENCED(i) ->
     do
     :: rqn > 0 -> x = rq[0]; rqremove(x); x = 0
     :: else -> break
     od
  :: else -> skip
  fi;
#endif
  /* lib_queue.lua 20-25: drop the lapsed entries (and the record of a set it handed the key to, which this model has none of) */
#ifndef BUG_NO_DROP_LAPSED
  j = 0;
  do
  :: j < rqn && lapse[rq[j]] == 0 -> x = rq[j]; rqremove(x); x = 0; j = 0
  :: j < rqn && lapse[rq[j]] > 0 -> j++
  :: else -> break
  od;
#endif
  if
  :: rqn > 0 ->
     /* 14-25: pop the first, with a fence (fenced: every entry asks for one) */
     j = rq[0];
     /* fifo: no live entry was queued before the popped one */
     k = 0;
     do
     :: k < NC -> assert(!(inq[k] && lapse[k] > 0 && before[k * NC + j])); k++
     :: else -> break
     od;
     if
     :: lapse[j] == 0 -> untaken[j] = 2                 /* a lapsed entry */
     :: lapse[j] > 0 && alive[j] && inacq[j] -> untaken[j] = 1
     :: else -> skip                                    /* a live entry of one gone */
     fi;
     age[j] = 0;
     rqremove(j);
     fctr++;                                      /* 57 take_fence */
     holder = j + 1; lexp = TTL;                  /* 59 SET token PX ttl */
     announce_to(j)                               /* 60 */
  :: else ->
     holder = 0; lexp = 0;                        /* 64 DEL */
     announce_plain()                             /* 65 */
  fi;
  j = 0
}

/*
 * lock_release.lua with the queue and the fence counter (and the
 * caller's entry, ARGV[5], when withdraw), for client i; rres is 1 when
 * released, 0 when not held, R_ERR when refused (only when mayrefuse).
 */
inline release(i, withdraw, mayrefuse) {
  if
  :: holder != i + 1 ->                           /* 35-40 */
     if
     :: withdraw -> d_step { rqremove(i) }        /* 37 ZREM the entry */
     :: else -> skip
     fi;
     rres = 0
  :: holder == i + 1 && rqn > 0 && mayrefuse && refuse > 0 ->
     /* 42-46 EXISTS, TIME, GET fence refused, or the first write (ZREM,
        pop_entry): nothing written */
     refuse--; rres = R_ERR
  :: holder == i + 1 && rqn > 0 ->                /* 42-47 the queue exists */
     handoff(); rres = 1
  :: holder == i + 1 && rqn == 0 ->               /* 64-66 */
     holder = 0; lexp = 0; announce_plain(); rres = 1
  fi
}

/* deleteIfOwned: the withdraw (store.withdraw), which may be lost; after a
   refused ZREM, the release over the lock key alone (the entry lapses) */
inline cleanup(i) {
  if
  :: lose > 0 -> lose--
  :: true ->
     if
     :: zrref[i] && holder == i + 1 -> holder = 0; lexp = 0; announce_plain()
     :: zrref[i] && holder != i + 1 -> skip
     :: else -> release(i, true, false)
     fi
  fi;
  zrref[i] = false;
  rres = 0
}

/* acquireOnce's SET NX PX (store_redis.go), for client i: R_LOST stands
   for its nil reply, the key is taken */
inline trysetnx(i) {
  if
  :: refuse > 0 -> refuse--; rres = R_ERR         /* SET refused (OOM): nothing written */
  :: true ->
     if
     :: holder == 0 -> holder = i + 1; lexp = TTL; rres = R_OK
     :: holder != 0 -> rres = R_LOST
     fi
  fi
}

/* lock_confirm.lua with the fence counter, for client i */
inline confirm(i) {
  if
  :: holder != i + 1 -> rres = 0                  /* 16-18 */
  :: else ->
     sx = 0;                                      /* no write yet */
#ifdef BUG_CONFIRM_WRITE_FIRST
     lexp = TTL; sx = 1;                          /* the old order: PEXPIRE first */
#endif
     if
     :: refuse > 0 ->                             /* 21 GET fence (23 TIME) refused */
        refuse--;
        assert(sx == 0);                          /* refused_clean */
        rres = R_ERR
     :: true ->
        lf = fctr;                                /* 21 (fctr 0: no counter) */
        lexp = TTL;                               /* 26 PEXPIRE */
        if
        :: lf > 0 -> rf = lf                      /* 28-29 */
        :: else -> fctr++; rf = fctr              /* 30-31 take_fence */
        fi;
        rres = R_OK
     fi;
     sx = 0; lf = 0
  fi
}

/* lock_refresh.lua, for client i (no election value) */
inline refresh(i) {
  if
  :: holder == i + 1 -> lexp = TTL; rres = R_OK   /* 15 PEXPIRE */
  :: else -> rres = 0                             /* 6-8 */
  fi
}

/* the fenced resource: it accepts a write whose fence is higher than the last */
inline wland(w) {
  if
  :: wf[w] > rlast ->
     assert(wg[w] >= rlastg);                     /* fence_order */
     rlast = wf[w]; rlastg = wg[w]
  :: else -> skip                                 /* refused */
  fi;
  wlate[w] = false; wf[w] = 0; wg[w] = 0
}

/* a grant: the call returns the lock, valid for d ticks, with fence f */
inline grant(i, f, d) {
  d_step { grantb(i, f, d) };
  /* its write to the resource, with the fence: it lands at once, or late */
  if
  :: !FENCED(i) -> skip                           /* no fence: it does not write there */
  :: FENCED(i) && pauses > 0 -> pauses--; wlate[i] = true; wf[i] = f; wg[i] = gseq
  :: FENCED(i) -> d_step { wf[i] = f; wg[i] = gseq; wland(i) }
  fi
}

inline grantb(i, f, d) {
  holding[i] = true; dl[i] = d; myf[i] = f;
  untaken[i] = 0; age[i] = 0; inacq[i] = false; lagged[i] = false;
  if
  :: FENCED(i) ->
     assert(f > gmax);                            /* fence_grant */
     gmax = f; gseq++
  :: else -> skip
  fi
}

/* a pause: the request about to be sent waits for the next tick (or more) */
inline maypause(i) {
  if
  :: pauses > 0 -> pauses--; paused[i] = true
  :: true
  fi
}

/* Sending: an attempt; one at or after the slot's end starts the next slot */
inline sending(i) {
  if
  :: !queued[i] -> queued[i] = true; since[i] = 0
  :: else -> skip
  fi;
  if
  :: slot[i] == 0 -> slot[i] = SLOT
  :: else -> skip
  fi;
  missed[i] = false;
  pdl[i] = VALID;
#ifndef BUG_WAKE_USED_BY_INFLIGHT
  infl[i] = true;
#endif
  maypause(i)
}

proctype client(byte i) {
  bool first;
  byte rs;               /* the request: 0 to send, 1 its reply is due, 2 to send again */
  byte rres, rf, rh;

  /* Ticket */
  atomic {
    inacq[i] = true;
#ifdef TRYONCE
    if
    :: i == 1 -> pdl[i] = VALID; maypause(i); goto tryonce   /* NoRetry: no Ticket */
    :: else -> skip
    fi;
#endif
    if
    :: lqn[LOCKER(i)] > 0 -> join(i, false, 0); slot[i] = SLOT; goto wait
    :: else -> first = true; existed[i] = (sub[LOCKER(i)] != 0); evseen[i] = false; sending(i)
    fi
  }
attempt:
  do
  :: atomic {
       !paused[i] && rs != 1 ->
       obtain(i);
       if
       :: resend > 0 -> resend--; rs = 2; paused[i] = true   /* the reply is lost: go-redis
                                                                sends it again, after a timeout */
       :: true -> rs = 1
       fi
     }
  :: atomic {   /* the reply (another client's request may be answered first) */
       rs == 1 ->
       rs = 0;
#ifndef BUG_WAKE_USED_BY_INFLIGHT
       infl[i] = false;
#endif
       if
       :: i == 2 && crash > 0 -> crash--; alive[i] = false; inacq[i] = false; holding[i] = false; goto dead
       :: true
       fi;
       assert(!(rres == R_LOST && rh == i + 1));   /* not_lost_to_self */
       if
       :: rres == R_ERR -> goto clean                              /* landedError */
       :: rres == R_OK && pdl[i] > 0 -> won(i); grant(i, rf, pdl[i]); rres = 0; rf = 0; goto hold
       :: rres == R_OK && pdl[i] == 0 -> goto clean                /* past its validity */
       :: rres == R_LOST && first -> first = false; join(i, true, rh); slot[i] = SLOT
       :: rres == R_LOST && !first -> lost(i, rh)
       fi;
       rres = 0; rf = 0; rh = 0;
       goto wait
     }
  od;
#ifdef TRYONCE
tryonce:
  /* acquireOnce (store_redis.go): SET NX PX; when it answers nil, GET */
  do
  :: atomic {
       !paused[i] && rs != 1 ->
       trysetnx(i);
       if
       :: resend > 0 -> resend--; rs = 2; paused[i] = true
       :: true -> rs = 1
       fi
     }
  :: atomic {
       rs == 1 ->
       rs = 0;
       if
       :: rres == R_OK && pdl[i] > 0 -> grant(i, 0, pdl[i]); rres = 0; goto hold
       :: rres == R_OK && pdl[i] == 0 -> goto clean      /* past its validity */
       :: rres == R_LOST -> break                   /* taken: read its holder */
       :: rres == R_ERR -> goto done             /* an error reply: not landed */
       fi
     }
  od;
  /* the GET, a request of its own: anything may have happened since the
     SET (a pause, ticks, releases, other takers) */
  atomic {
    !paused[i] ->
    rres = 0;
    rh = holder;
#ifndef BUG_TRY_NOT_RESEND_SAFE
    if
    :: rh == i + 1 && pdl[i] > 0 -> rh = 0; grant(i, 0, pdl[i]); goto hold   /* a resend took it */
    :: rh == i + 1 && pdl[i] == 0 -> goto clean
    :: else -> skip
    fi;
#endif
    assert(rh != i + 1);                   /* not_lost_to_self */
    goto done                              /* busy: held by another, or freed since */
  }
#endif
wait:
  /* TakeHandoff, Plan: no step of its own until there is something to do */
  atomic {
    if
    :: heard[i] ->
       /* handedOver: Won, and a confirmation when less than half the TTL is left */
       heard[i] = false; rf = heardf[i]; heardf[i] = 0;
       won(i);
       if
       :: since[i] == 0 && 2 * VALID >= TTL -> grant(i, rf, VALID); rf = 0; goto hold
       :: else -> pdl[i] = VALID; maypause(i); goto confirming
       fi
    :: !heard[i] && TRYNOW(i) -> sending(i); goto attempt
    :: !heard[i] && !TRYNOW(i) && !HEAD(i) && slot[i] == 0 ->
       slot[i] = SLOT; goto wait   /* behind the head: the slot passes */
    /* ctx ends (or the strategy gives up), client 2 crashes: instead of a step */
    :: !heard[i] && (TRYNOW(i) || slot[i] == 0) && giveup > 0 && i < 2 -> giveup--; goto leave
    :: !heard[i] && (TRYNOW(i) || slot[i] == 0) && crash > 0 && i == 2 ->
       crash--; alive[i] = false; inacq[i] = false; holding[i] = false; goto dead
    fi
  }
confirming:
  atomic {
    !paused[i] ->
#ifdef BUG_LATE_HANDOFF_NO_CONFIRM
    refresh(i)           /* the old code: a refresh, and the announced fence */
#else
    confirm(i)
#endif
    ;
    if
    :: rres == R_OK && pdl[i] > 0 -> grant(i, rf, pdl[i]); rres = 0; rf = 0; goto hold
    :: else -> goto clean                       /* ErrLockLost, or the error */
    fi
  }
leave:
  /* ctx done: Leave, and the withdraw when it may be queued */
  atomic {
    lremove(i);
    if
    :: queued[i] -> goto clean
    :: else -> goto done
    fi
  }
clean:
  /* deleteIfOwned (settle, handedOver) or the withdraw of Leave */
  atomic { cleanup(i); lremove(i); rf = 0; rh = 0; goto done }
hold:
  do
  :: atomic {   /* the lease renews (a holder without a lease does not) */
       !rest[i] && dl[i] > 0 && dl[i] < VALID ->
       pdl[i] = VALID;
       maypause(i);
       if
       :: paused[i] -> goto renewing
       :: else -> skip
       fi;
       refresh(i);
       if
       :: rres == R_OK -> dl[i] = pdl[i]; lagged[i] = false
       :: else -> holding[i] = false; rres = 0; goto releasing   /* ErrNotHeld */
       fi;
       rres = 0
     }
  :: atomic { dl[i] == 0 -> holding[i] = false; maypause(i); goto releasing }   /* the watchdog */
  :: atomic { !rest[i] && dl[i] > 0 -> holding[i] = false; maypause(i); goto releasing }
  :: atomic { i == 2 && crash > 0 && !rest[i] -> crash--; alive[i] = false; holding[i] = false; goto dead }
  :: atomic { lag > 0 && !lagged[i] && dl[i] > 0 && !rest[i] -> lag--; lagged[i] = true; dl[i]++ }
  :: atomic { !rest[i] && dl[i] > 0 -> rest[i] = true }
  od;
renewing:
  atomic {
    !paused[i] ->
    refresh(i);
    if
    :: rres == R_OK && dl[i] > 0 -> dl[i] = pdl[i]; lagged[i] = false; rres = 0; goto hold
    :: else -> holding[i] = false; rres = 0; goto releasing   /* ErrNotHeld, or the watchdog first */
    fi
  }
releasing:
  do
  :: atomic {
       !paused[i] && rs != 1 ->
       release(i, false, rs == 0);
       if
       :: resend > 0 && rres != R_ERR -> resend--; rs = 2; paused[i] = true
       :: true -> rs = 1
       fi
     }
  :: atomic {
       rs == 1 ->
       rs = 0;
       if
       :: rres == R_ERR && dl[i] > 0 -> rres = 0; holding[i] = true; goto hold   /* resumeRenewal */
       :: else -> goto done
       fi
     }
  od;
done:
  atomic {
    inacq[i] = false; rest[i] = false; waiting[i] = false; queued[i] = false; heard[i] = false;
    heardf[i] = 0; missed[i] = false; slot[i] = 0; since[i] = 0; pdl[i] = 0; dl[i] = 0;
    myf[i] = 0; holding[i] = false; lagged[i] = false; zrref[i] = false;
    existed[i] = false; evseen[i] = false; rres = 0; rf = 0; rh = 0
  }
  goto end;
dead:
  atomic {
    alive[i] = false; inacq[i] = false; holding[i] = false; rest[i] = false;
    heard[i] = false; heardf[i] = 0; missed[i] = false; slot[i] = 0; since[i] = 0;
    pdl[i] = 0; dl[i] = 0; myf[i] = 0; lagged[i] = false; zrref[i] = false;
    rres = 0; rf = 0; rh = 0
  }
end:
  skip
}

/* the Lockers' dispatchers: subscription confirmed, announcements heard, lost, late */
inline deliver(j) {
  d_step { deliverb(j) }
}

inline deliverb(j) {
  ann[j] = 0;
  if
  :: waiting[j] -> heard[j] = true; heardf[j] = annf[j]     /* handedLocked */
  :: else -> kept[j] = true; keptf[j] = annf[j]             /* q.handedTo */
  fi;
  annf[j] = 0
}

active proctype dispatch() {
end_d:
  do
  :: atomic { sub[0] == 1 -> sub[0] = 2; events(0); kick(0) }
  :: atomic { sub[1] == 1 -> sub[1] = 2; events(1); kick(1) }
  :: atomic { ann[0] == 1 -> deliver(0) }
  :: atomic { ann[1] == 1 -> deliver(1) }
  :: atomic { ann[2] == 1 -> deliver(2) }
  :: atomic { annp[0] == 1 -> annp[0] = 0; events(0); kick(0) }
  :: atomic { annp[1] == 1 -> annp[1] = 0; events(1); kick(1) }
  :: atomic { lose > 0 && ann[0] == 1 -> lose--; ann[0] = 0; annf[0] = 0 }
  :: atomic { lose > 0 && ann[1] == 1 -> lose--; ann[1] = 0; annf[1] = 0 }
  :: atomic { lose > 0 && ann[2] == 1 -> lose--; ann[2] = 0; annf[2] = 0 }
  :: atomic { lose > 0 && annp[0] == 1 -> lose--; annp[0] = 0 }
  :: atomic { lose > 0 && annp[1] == 1 -> lose--; annp[1] = 0 }
  :: atomic { late > 0 && ann[0] == 1 -> late--; ann[0] = 2 }
  :: atomic { late > 0 && ann[1] == 1 -> late--; ann[1] = 2 }
  :: atomic { late > 0 && ann[2] == 1 -> late--; ann[2] = 2 }
  :: atomic { late > 0 && annp[0] == 1 -> late--; annp[0] = 2 }
  :: atomic { late > 0 && annp[1] == 1 -> late--; annp[1] = 2 }
  od
}

#define PAUSED (paused[0] || paused[1] || paused[2])

/* the nondeterministic part of a tick for client t: a pause, a late write, a late announcement */
inline ticknd(t) {
  if
  :: paused[t] -> paused[t] = false
  :: paused[t] -> skip                            /* a longer pause */
  :: else -> skip
  fi;
  if
  :: wlate[t] -> d_step { wland(t) }
  :: wlate[t] -> skip
  :: else -> skip
  fi;
  if
  :: ann[t] == 2 -> ann[t] = 1
  :: ann[t] == 2 -> skip
  :: else -> skip
  fi
}

active proctype tick() {
end_t:
  do
  :: timeout ->
     atomic {
       d_step {
         /* handed_taken and free_taken: the state at the end of the instant */
         tn = 0;
         ti = 0;
         do
         :: ti < NC ->
            if
            :: untaken[ti] && (holder != ti + 1 || PAUSED || (untaken[ti] == 1 && !(alive[ti] && inacq[ti]))) ->
               untaken[ti] = 0; age[ti] = 0   /* given back or moved on; excused */
            :: untaken[ti] && holder == ti + 1 && !PAUSED && (untaken[ti] == 2 || (alive[ti] && inacq[ti])) ->
               age[ti]++;
               assert(age[ti] <= K)                 /* handed_taken */
            :: else -> skip
            fi;
            if
            :: alive[ti] && inacq[ti] -> tn++
            :: else -> skip
            fi;
            ti++
         :: else -> break
         od;
         if
         :: holder == 0 && tn > 0 && !PAUSED ->
            freeage++;
            assert(freeage <= K)                    /* free_taken */
         :: else -> freeage = 0
         fi;
         /* the tick */
         ti = 0;
         do
         :: ti < NC ->
            dec(dl[ti]); dec(pdl[ti]); dec(slot[ti]); dec(lapse[ti]);
            if
            :: queued[ti] && inacq[ti] -> since[ti] = 1
            :: else -> skip
            fi;
            rest[ti] = false;
            ti++
         :: else -> break
         od;
         /* the key expires */
         if
         :: lexp > 0 -> lexp--;
            if
            :: lexp == 0 -> holder = 0
            :: else -> skip
            fi
         :: else -> skip
         fi;
         /* the queue key lapses with its newest entry */
         if
         :: rqn > 0 && lapse[0] == 0 && lapse[1] == 0 && lapse[2] == 0 ->
            do
            :: rqn > 0 -> x = rq[0]; rqremove(x); x = 0
            :: else -> break
            od
         :: else -> skip
         fi;
         /* mutex */
         tn = 0;
         ti = 0;
         do
         :: ti < NC ->
            if
            :: holding[ti] && dl[ti] > 0 ->
               tn++;
               assert(holder == ti + 1 && lexp > 0 && (myf[ti] == fctr || !FENCED(ti)))
            :: else -> skip
            fi;
            ti++
         :: else -> break
         od;
         assert(tn <= 1);
         ti = 0; tn = 0
       };
       ticknd(0); ticknd(1); ticknd(2);
       if
       :: annp[0] == 2 -> annp[0] = 1
       :: annp[0] == 2 -> skip
       :: else -> skip
       fi;
       if
       :: annp[1] == 2 -> annp[1] = 1
       :: annp[1] == 2 -> skip
       :: else -> skip
       fi
     }
  od
}

init {
  atomic {
    k = 0;
    do
    :: k < NC -> alive[k] = true; run client(k); k++
    :: else -> break
    od;
    k = 0
  }
}
