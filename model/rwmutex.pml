/* mirrors: scripts/rw_acquire.lua ceac1ca1601f640227daa8d8d0552299b97762cc */
/* mirrors: scripts/hold_release.lua 2bfeac10f6463bf7a93c79d3d575e9d48dc7ddc8 */
/* mirrors: scripts/hold_refresh.lua 0e9d500a17874f9a01302babfcea27df7f694123 */
/* mirrors: scripts/lib_hold.lua dcc83461b5fbcf9e71ce362340c0b5718a1d743d */
/* check: safety -DFAULTS=2 */
/* bug: BUG_RW_NO_INTENT safety */

/*
 * A read-write lock on one key: clients 0 .. NREAD-1 read (ROUNDS holds
 * each), client NREAD writes once. One sorted set: r: members scored by
 * expiry, the w: member and the q: intent by minus it (here: ticks left of
 * each). Clients poll at the end of each retry slot and try at once on a
 * release's announcement (hold_release.lua publishes when it freed
 * something). Time as in semaphore.pml. Faults (one budget): a pause of a
 * request for one tick. The intent lives ILIFE ticks, longer than a slot
 * and a pause, so a waiting writer's intent stays live.
 *
 * Properties (assertions):
 *  - rw_exclusive: a writer holding before its deadline holds beside no
 *    reader holding before its deadline (and each holds in Redis);
 *  - writer_first: a reader whose call began after the writer's first
 *    refused attempt is not let in while that writer waits.
 */

#ifndef NREAD
#define NREAD 2
#endif
#define NC (NREAD + 1)
#define W NREAD
#define TTL 3
#define DRIFT 1
#define SLOT 1
#define ILIFE 3
#ifndef ROUNDS
#define ROUNDS 2
#endif
#ifndef FAULTS
#define FAULTS 1
#endif
byte faults = FAULTS;

byte hexp[NC];     /* ticks left of each client's hold in the set */
byte qexp;         /* ticks left of the writer's intent */
bool holding[NC];
byte dl[NC], pdl[NC], paused[NC];
bool rest[NC], woken[NC];
bool wwaiting;     /* the writer was refused and still waits */
bool after[NC];    /* this reader's call began while the writer waited */
hidden byte k, hres;

inline maypause(i) {
  atomic {
    if
    :: faults > 0 -> faults--; paused[i] = 1
    :: true
    fi
  };
  (paused[i] == 0)
}

inline announce() {
  k = 0;
  do
  :: k < NC -> woken[k] = true; k++
  :: else -> break
  od;
  k = 0
}

/* rw_acquire.lua for client i; hres = 1 when it holds */
inline rwacquire(i) {
  if
  :: hexp[i] > 0 -> hres = 1                     /* mine: a resend, taken again */
  :: else ->
     if
     :: i == W ->
        if
        :: hexp[0] > 0 || hexp[1] > 0 || hexp[NREAD - 1] > 0 ->
#ifndef BUG_RW_NO_INTENT
           qexp = ILIFE;
#endif
           hres = 0
        :: else -> hres = 1
        fi
     :: else ->
        if
        :: hexp[W] > 0 || qexp > 0 -> hres = 0     /* a writer holds or waits */
        :: else -> hres = 1
        fi
     fi
  fi;
  if
  :: hres == 1 -> hexp[i] = TTL;
     if :: i == W -> qexp = 0 :: else -> skip fi
  :: else -> skip
  fi
}

proctype client(byte i) {
  byte r = 0;
  do
  :: r < (i == W -> 1 : ROUNDS) ->
     atomic { !rest[i] -> after[i] = (i != W && wwaiting) }
     do
     :: atomic { (!rest[i] || woken[i]) -> woken[i] = false; pdl[i] = TTL - DRIFT }
        maypause(i);
        atomic {
          rwacquire(i);
          if
          :: hres == 1 && pdl[i] > 0 ->
             /* writer_first */
             assert(!(i != W && after[i] && wwaiting));
             holding[i] = true; dl[i] = pdl[i];
             if :: i == W -> wwaiting = false :: else -> skip fi;
             hres = 0; break
          :: hres == 1 -> hexp[i] = 0; hres = 0;          /* too late: released, the call fails */
             if :: i == W -> wwaiting = false :: else -> skip fi;
             break
          :: else -> hres = 0; rest[i] = true;
             if :: i == W -> wwaiting = true :: else -> skip fi
          fi
        }
     od;
     do
     :: atomic { holding[i] && dl[i] == 0 -> holding[i] = false; break }
     :: atomic { holding[i] && dl[i] == 1 -> pdl[i] = TTL - DRIFT }
        maypause(i);
        atomic {
          /* hold_refresh.lua */
          if
          :: hexp[i] > 0 -> hexp[i] = TTL; dl[i] = pdl[i]
          :: else -> holding[i] = false; break
          fi
        }
     :: atomic { holding[i] && dl[i] > 0 && !rest[i] ->
          /* hold_release.lua */
          if :: hexp[i] > 0 -> hexp[i] = 0; announce() :: else -> skip fi;
          holding[i] = false; break }
     :: atomic { holding[i] && dl[i] > 1 && !rest[i] -> rest[i] = true }
     od;
     atomic { dl[i] = 0; pdl[i] = 0; after[i] = false; woken[i] = false; r++ }
  :: else -> break
  od;
  r = 0
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
       dec(qexp);
       k = 0;
       do
       :: k < NC -> dec(hexp[k]); dec(dl[k]); dec(pdl[k]); dec(paused[k]); rest[k] = false;
          if
          :: holding[k] && dl[k] > 0 -> assert(hexp[k] > 0)
          :: else -> skip
          fi;
          k++
       :: else -> break
       od;
       /* rw_exclusive */
       assert(!(holding[W] && dl[W] > 0 && ((holding[0] && dl[0] > 0) || (holding[NREAD - 1] && dl[NREAD - 1] > 0))));
       k = 0
     }
  od
}

init {
  atomic {
    k = 0;
    do
    :: k < NC -> run client(k); k++
    :: else -> break
    od;
    k = 0
  }
}
