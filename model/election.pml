/* mirrors: scripts/lock_obtain.lua 6f3d9912181d1c895a8ea1e4c496d306fa740e95 */
/* mirrors: scripts/lock_refresh.lua 97de6635709500b52a125c2451b198118328d4bb */
/* mirrors: scripts/lock_release.lua 6b661eb34dd743f16c7cdc6e4d5e2e286b2c55e4 */
/* mirrors: scripts/election_proclaim.lua 2b4e99d444d8c0db2f5b02253ba3a2c3572cb4e6 */
/* mirrors: scripts/election_leader.lua c1f6f74496654489e03c96e0469f62d4c9f096af */
/* mirrors: scripts/lib_fence.lua c1e355d42a7bc2fa209c21e45bac76f4deb77325 */
/* check: safety -DFAULTS=2 */
/* bug: BUG_PROCLAIM_UNCHECKED safety */

/*
 * An election on one key: NCAND candidates campaign ROUNDS times each;
 * a term is the election's fenced lock, held by a token that carries the
 * candidate's value; the leader proclaims new values (only while it
 * holds), renews, resigns (lock_release.lua deletes the proclaimed value)
 * or crashes; an observer reads the leader (election_leader.lua).
 * Abstracted: the handoff queue (a resigning leader here just deletes the
 * key; waiting candidates poll at the end of each retry slot), the
 * announcements (observers poll too).
 *
 * Time as in semaphore.pml: a tick only when nothing else can move; TTLs
 * as ticks left; a leader's deadline is TTL - DRIFT from before its
 * request. Faults (one budget): a pause (a request that waits a tick: a
 * late proclaim, refresh or obtain), a crash.
 *
 * Properties (assertions):
 *  - one_leader: at most one candidate leads before its deadline, and it
 *    holds the key, with the fence of its term;
 *  - terms_increase: each term's fence is larger than the last;
 *  - observer_monotonic: an observer never sees an older term (fence)
 *    after a newer one;
 *  - value_current: a value shown is the one the holder proclaimed last
 *    (acknowledged or not), never a deposed leader's, and a holder's
 *    acknowledged proclamation is shown while it holds.
 */

#ifndef NCAND
#define NCAND 2
#endif
#ifndef ROUNDS
#define ROUNDS 2
#endif
#define TTL 3
#define DRIFT 1
#define SLOT 1

#ifndef FAULTS
#define FAULTS 1
#endif
byte faults = FAULTS;

/* Redis: the lock key (a token: 1 + candidate * ROUNDS + round; 0: none),
   its TTL left, the fence counter, the proclaimed value "<token>\n<value>" */
byte lockv, lttl, fctr;
byte pvtok, pvval, pvttl;

/* what each token proclaimed last: sent, and acknowledged */
byte sentv[NCAND * ROUNDS + 1];
byte ackv[NCAND * ROUNDS + 1];

bool leading[NCAND];
byte dl[NCAND], pdl[NCAND], myf[NCAND], mytok[NCAND], termf[NCAND];
byte paused[NCAND + 1];
bool rest[NCAND + 1];
byte lastf;          /* the fence of the latest term */

hidden byte k, hres;

inline maypause(i) {
  atomic {
    if
    :: faults > 0 -> faults--; paused[i] = 1
    :: faults > 0 -> faults--; paused[i] = TTL + 1   /* a long pause: its lease ends meanwhile */
    :: true
    fi
  };
  (paused[i] == 0)
}

proctype cand(byte c) {
  byte r, v;
  r = 0;
  do
  :: r < ROUNDS ->
     mytok[c] = 1 + c * ROUNDS + r;
     /* a campaign: an attempt at each slot until it wins */
     do
     :: atomic { !rest[c] -> pdl[c] = TTL - DRIFT }
        maypause(c);
        atomic {
          /* lock_obtain.lua, without a queue: SET NX, or the caller's own token */
          if
          :: lockv == 0 || lockv == mytok[c] ->
             lockv = mytok[c]; lttl = TTL;
             fctr++; hres = fctr;
             assert(hres > lastf); lastf = hres;   /* terms_increase */
             if
             :: pdl[c] > 0 -> leading[c] = true; dl[c] = pdl[c]; myf[c] = hres; termf[c] = hres; hres = 0; break
             :: else -> hres = 0; lockv = 0; lttl = 0; pvtok = 0; pvval = 0; pvttl = 0; break  /* ErrLockLost: released */
             fi
          :: else -> rest[c] = true
          fi
        }
     od;
     v = 0;
     /* the term */
     do
     :: atomic { leading[c] && dl[c] == 0 -> leading[c] = false; break }   /* lost: the lease ends it */
     :: atomic { leading[c] && dl[c] == 1 -> pdl[c] = TTL - DRIFT }
        maypause(c);
        atomic {
          /* lock_refresh.lua with the proclaimed value */
          if
          :: lockv == mytok[c] ->
             lttl = TTL;
             if :: pvtok == mytok[c] -> pvttl = TTL :: else -> skip fi;
             dl[c] = pdl[c]
          :: else -> leading[c] = false; break
          fi
        }
     :: atomic { leading[c] && dl[c] > 0 && v < 2 && !rest[c] -> v++; sentv[mytok[c]] = v }
        maypause(c);
        atomic {
          /* election_proclaim.lua */
#ifndef BUG_PROCLAIM_UNCHECKED
          if
          :: lockv == mytok[c] ->
#else
          if
          :: true ->
#endif
             pvtok = mytok[c]; pvval = v; pvttl = (lttl > 0 -> lttl : TTL);
             if :: lockv == mytok[c] -> ackv[mytok[c]] = v :: else -> skip fi
          :: else -> leading[c] = false; break   /* ErrLockLost */
          fi
        }
     :: atomic { leading[c] && dl[c] > 0 && !rest[c] ->
          /* lock_release.lua with the proclaimed value */
          if
          :: lockv == mytok[c] -> lockv = 0; lttl = 0; pvtok = 0; pvval = 0; pvttl = 0
          :: else -> skip
          fi;
          leading[c] = false; break }
     :: atomic { leading[c] && dl[c] > 0 && !rest[c] && faults > 0 -> faults--; leading[c] = false; break }  /* crash */
     :: atomic { leading[c] && dl[c] > 1 && !rest[c] -> rest[c] = true }
     od;
     atomic { v = 0; dl[c] = 0; pdl[c] = 0; myf[c] = 0; termf[c] = 0; r++; mytok[c] = 0 }
  :: else -> break
  od
}

/* an observer: Leader, polled */
active proctype observer() {
  byte seenf, t, f, val;
  bool has;
end_o:
  do
  :: atomic { !rest[NCAND] ->
       /* election_leader.lua */
       if
       :: lockv != 0 ->
          t = lockv; f = fctr;
#ifndef BUG_LEADER_NO_PREFIX
          has = (pvtok == lockv && pvttl > 0);
#else
          has = (pvttl > 0);
#endif
          val = (has -> pvval : 0);
          /* observer_monotonic */
          assert(f >= seenf); seenf = f;
          /* value_current */
          assert(!has || val == sentv[t] || val == ackv[t]);
          assert(!has || pvtok == t);
          assert(has || ackv[t] == 0);
       :: else -> skip
       fi;
       t = 0; f = 0; val = 0; has = false;
       rest[NCAND] = true }
  od
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
       dec(lttl); dec(pvttl);
       if :: lttl == 0 -> lockv = 0 :: else -> skip fi;
       if :: pvttl == 0 -> pvtok = 0; pvval = 0 :: else -> skip fi;
       k = 0; hres = 0;
       do
       :: k < NCAND ->
          dec(dl[k]); dec(pdl[k]); dec(paused[k]); rest[k] = false;
          /* one_leader */
          if
          :: leading[k] && dl[k] > 0 -> hres++; assert(lockv == mytok[k] && myf[k] == fctr)
          :: else -> skip
          fi;
          k++
       :: else -> break
       od;
       rest[NCAND] = false;
       assert(hres <= 1);
       k = 0; hres = 0
     }
  od
}

init {
  atomic {
    k = 0;
    do
    :: k < NCAND -> run cand(k); k++
    :: else -> break
    od;
    k = 0
  }
}
