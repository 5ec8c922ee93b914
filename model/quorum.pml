/* mirrors: scripts/lock_obtain.lua 6f3d9912181d1c895a8ea1e4c496d306fa740e95 */
/* mirrors: scripts/lock_refresh.lua 97de6635709500b52a125c2451b198118328d4bb */
/* mirrors: scripts/lock_release.lua 6b661eb34dd743f16c7cdc6e4d5e2e286b2c55e4 */
/* check: safety */
/* bug: HAZARD_RESTART_EMPTY safety -DFAULTS=1 */
/* check: safety -DHAZARD_RESTART_EMPTY -DDELAYED_RESTART */
/* bug: HAZARD_RESTART_SHORT safety -DHAZARD_RESTART_EMPTY -DDELAYED_RESTART */
/* bug: BUG_QUORUM_MAJORITY_OFF_BY_ONE safety */
/* bug: BUG_QUORUM_VALIDITY_FROM_REPLY safety */

/*
 * A quorum of NM = 3 independent masters (quorum.go, quorum_fanout.go;
 * see NOTES-once.md), NCL clients, each making one waiting Obtain (one
 * token) of up to ATTEMPTS attempts, then holding, renewing and
 * releasing.
 *
 * An attempt (quorumStore.acquire) asks every master: each master runs
 * lock_obtain.lua (no queue, no fence: a quorum is never queued) in its
 * own atomic step, interleaved with everything else; an answer is won
 * (the key set, or already holding the caller's token), lost (another
 * token), or an error (unreachable, or its reply lost). won >= MAJ: held,
 * if the validity (TTL - DRIFT from before the request, so less the time
 * the attempt took) has not run out (settle: otherwise deleteIfOwned,
 * which is a release on every master, and ErrLockLost); won + lost < MAJ:
 * an error, after the undo; otherwise busy, after the undo. The undo
 * releases (lock_release.lua) on every master that did not answer lost.
 * A busy client tries again at once (a release was announced) or after a
 * tick (its retry slot). A holder renews when one tick of validity is
 * left (refresh on every master: a majority yes moves the Deadline; more
 * than NM - MAJ no is ErrNotHeld, the lease lost; else an error, retried
 * until the Deadline), and releases on every master when it likes.
 *
 * Time as in semaphore.pml (NOTES-b.md). Faults, one budget FAULTS: a
 * master unreachable for one request, or its reply lost (the request
 * landed); a client pause (the rest of a fan-out lands a tick late, or
 * after the TTL); a lagging client clock (the Deadline as late as the
 * allowance lets it, TTL after the request); with HAZARD_RESTART_EMPTY, a
 * master that restarts without persistence (its keys gone), at once or,
 * with DELAYED_RESTART, kept out (unreachable) for RESTART_OUT = TTL ticks
 * before it answers again.
 *
 * Property (assertions, at every tick and when a client starts holding):
 *  - quorum_mutex: no two clients hold before their own Deadlines;
 *  - quorum_held (without restarts): a client that holds before its
 *    Deadline has its token on a majority of the masters.
 */

#ifndef NCL
#define NCL 2
#endif
#define NM 3
#ifndef BUG_QUORUM_MAJORITY_OFF_BY_ONE
#define MAJ (NM / 2 + 1)
#else
#define MAJ (NM / 2)        /* len(nodes)/2: not a majority */
#endif
#define TTL 3
#define DRIFT 1
#ifndef ATTEMPTS
#define ATTEMPTS 2
#endif
#ifdef HAZARD_RESTART_SHORT
#define RESTART_OUT (TTL - 1)     /* out for less than the longest TTL */
#else
#define RESTART_OUT TTL
#endif

#ifndef FAULTS
#define FAULTS 2
#endif
byte faults = FAULTS;

/* the masters: the lock key's token (client + 1; 0: none), its TTL left,
   and how long a restarted master stays out */
byte lockv[NM], lttl[NM], down[NM];

/* clients */
bool holds[NCL];
byte dl[NCL], pdl[NCL];
byte paused[NCL];
bool rest[NCL + 1];

hidden byte k, j, nheld, nm, won, lost;

#define TOK(c) ((c) + 1)
#define A_NONE 0
#define A_WON  1
#define A_LOST 2
#define A_ERR  3

inline deadline(c) {
  pdl[c] = TTL - DRIFT;
  if
  :: faults > 0 -> faults--; pdl[c] = TTL     /* the clock lags by the allowance */
  :: true
  fi
}

/* the request to master m: unreachable, its reply lost, or answered */
#define LINK(m, a, LAND) \
  if \
  :: down[m] > 0 -> a = A_ERR \
  :: down[m] == 0 && faults > 0 -> faults--; a = A_ERR \
  :: down[m] == 0 && faults > 0 -> faults--; LAND; a = A_ERR \
  :: down[m] == 0 -> LAND \
  fi

/* lock_obtain.lua without queue and fence on master m */
#define OBTAIN(c, m, a) \
  if \
  :: lockv[m] == 0 -> lockv[m] = TOK(c); lttl[m] = TTL; a = A_WON \
  :: lockv[m] == TOK(c) -> lttl[m] = TTL; a = A_WON \
  :: else -> a = A_LOST \
  fi

/* lock_refresh.lua on master m */
#define REFRESH(c, m, a) \
  if \
  :: lockv[m] == TOK(c) -> lttl[m] = TTL; a = A_WON \
  :: else -> a = A_LOST \
  fi

/* lock_release.lua on master m (nobody queued) */
#define RELEASE(c, m, a) \
  if \
  :: lockv[m] == TOK(c) -> lockv[m] = 0; lttl[m] = 0; a = A_WON \
  :: else -> a = A_LOST \
  fi

/* quorum_mutex: no other client holds before its Deadline */
inline check_mutex(c) {
  k = 0;
  do
  :: k < NCL -> assert(k == c || !(holds[k] && dl[k] > 0)); k++
  :: else -> break
  od;
  k = 0
}

/* ask every master: each request lands in its own step; a client pause
   makes the rest of the fan-out land late */
#define FANOUT(c, OP) \
  m = 0; \
  do \
  :: atomic { paused[c] == 0 -> \
       if \
       :: faults > 0 -> faults--; paused[c] = 1 \
       :: faults > 0 -> faults--; paused[c] = TTL + 1 \
       :: true -> LINK(m, ans[m], OP(c, m, ans[m])); \
          printf("MSG: client %d, master %d: %d (1 yes, 2 no, 3 error)\n", c, m, ans[m]); m++ \
       fi; \
       if :: m == NM -> m = 0; break :: else -> skip fi } \
  od

/* count the answers into won and lost, and forget them */
#define TALLY \
  won = 0; lost = 0; m = 0; \
  do \
  :: m < NM -> \
     if \
     :: ans[m] == A_WON -> won++ \
     :: ans[m] == A_LOST -> lost++ \
     :: else -> skip \
     fi; \
     m++ \
  :: else -> break \
  od; \
  m = 0

#define FORGET \
  m = 0; do :: m < NM -> ans[m] = A_NONE; m++ :: else -> break od; m = 0

proctype client(byte c) {
  byte ans[NM];
  byte m, tries;

  /* Obtain is called at a time of the caller's choosing */
  do
  :: atomic { !rest[c] -> rest[c] = true }
  :: atomic { !rest[c] -> break }
  od;

attempt:
  /* quorumStore.acquire: the same request to every master at once */
  atomic { tries++; deadline(c) }
  FANOUT(c, OBTAIN);
  atomic {
    TALLY;
#ifdef BUG_QUORUM_VALIDITY_FROM_REPLY
    /* the validity counted from the replies, not from before the request */
    if :: won >= MAJ && pdl[c] > 0 -> deadline(c) :: else -> skip fi;
#endif
    if
    :: won >= MAJ && pdl[c] > 0 ->
       holds[c] = true; dl[c] = pdl[c]; pdl[c] = 0;
       printf("MSG: client %d holds (%d won), Deadline in %d\n", c, won, dl[c]);
       won = 0; lost = 0;
       FORGET;
       check_mutex(c);
       goto hold
    :: won >= MAJ && pdl[c] == 0 ->
       /* settle: the reply came past the validity: deleteIfOwned (a
          release on every master), ErrLockLost */
       FORGET; tries = ATTEMPTS
    :: won < MAJ && won + lost < MAJ -> tries = ATTEMPTS   /* too many failed: an error, after the undo */
    :: won < MAJ && won + lost >= MAJ -> skip              /* busy, after the undo */
    fi;
    pdl[c] = 0; won = 0; lost = 0 }
  /* q.undo: release where it may have landed (every master that did not
     answer lost) */
  do
  :: atomic {
       if
       :: ans[m] != A_LOST -> LINK(m, ans[m], RELEASE(c, m, ans[m]))
       :: else -> skip
       fi;
       ans[m] = A_NONE; m++;
       if :: m == NM -> m = 0; break :: else -> skip fi }
  od;
  if
  :: tries < ATTEMPTS ->
     /* at once (woken by an announcement), or after some ticks (the end
        of its retry slot, the holder's TTL) */
     do
     :: atomic { !rest[c] -> rest[c] = true }
     :: atomic { !rest[c] -> break }
     od;
     goto attempt
  :: else -> goto done
  fi;

hold:
  do
  :: atomic { dl[c] == 0 -> holds[c] = false; break }          /* the lease ends */
  :: atomic { !rest[c] && dl[c] > 1 -> rest[c] = true }        /* holds past a tick */
  :: atomic { !rest[c] && dl[c] > 0 -> holds[c] = false; break }   /* Release */
  :: atomic { !rest[c] && dl[c] == 1 -> deadline(c) }
     /* the renewal: refresh on every master (quorumStore.refresh, count) */
     FANOUT(c, REFRESH);
     atomic {
       TALLY; FORGET;
       if
       :: won >= MAJ && dl[c] > 0 -> dl[c] = pdl[c]       /* the Deadline moves */
       :: won >= MAJ && dl[c] == 0 -> skip              /* lost meanwhile */
       :: won < MAJ && lost > NM - MAJ -> dl[c] = 0      /* ErrNotHeld: lost */
       :: won < MAJ && lost <= NM - MAJ -> skip          /* an error: retried until the Deadline */
       fi;
       won = 0; lost = 0; pdl[c] = 0 }
  od;
  /* the release on every master (also after a lost lease) */
  FANOUT(c, RELEASE);
  atomic { FORGET }
done:
  atomic { dl[c] = 0; pdl[c] = 0; m = 0; tries = 0; paused[c] = 0; rest[c] = false }
}

#ifdef HAZARD_RESTART_EMPTY
/* a master restarts without persistence */
active proctype chaos() {
end_c:
  do
  :: atomic { !rest[NCL] -> rest[NCL] = true }
  :: atomic { !rest[NCL] && faults > 0 ->
       faults--;
       if
       :: j = 0
       :: j = 1
       :: j = 2
       fi;
       lockv[j] = 0; lttl[j] = 0;
       printf("MSG: master %d restarts empty\n", j);
#ifdef DELAYED_RESTART
       down[j] = RESTART_OUT;
#endif
       j = 0 }
  od
}
#endif

/* quorum_held: c's token on a majority of the masters */
inline quorum_held(c) {
  j = 0; nm = 0;
  do
  :: j < NM -> if :: lockv[j] == TOK(c) -> nm++ :: else -> skip fi; j++
  :: else -> break
  od;
  assert(nm >= MAJ);
  j = 0; nm = 0
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
       /* quorum_mutex, quorum_held: before time moves on */
       k = 0; nheld = 0;
       do
       :: k < NCL ->
          if
          :: holds[k] && dl[k] > 0 ->
             nheld++;
#ifndef HAZARD_RESTART_EMPTY
             quorum_held(k);
#endif
             skip
          :: else -> skip
          fi;
          k++
       :: else -> break
       od;
       assert(nheld <= 1);
       printf("MSG: tick\n");
       k = 0;
       do
       :: k < NM ->
          dec(lttl[k]);
          if :: lttl[k] == 0 -> lockv[k] = 0 :: else -> skip fi;
          dec(down[k]);
          k++
       :: else -> break
       od;
       k = 0;
       do
       :: k < NCL -> dec(dl[k]); dec(pdl[k]); dec(paused[k]); rest[k] = false; k++
       :: else -> break
       od;
       rest[NCL] = false;
       k = 0; j = 0; nheld = 0
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
